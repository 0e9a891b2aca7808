"""The Python sandbox: hidden tests run against a solution in bubblewrap."""
