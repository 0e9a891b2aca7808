"""What runs in every worker process beside the tasks: runtime, dispatch, reconciler, sampler."""
