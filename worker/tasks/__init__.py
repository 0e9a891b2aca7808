"""The task seam: what a session works on, and one room per built-in task."""
