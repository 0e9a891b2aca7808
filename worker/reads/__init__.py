"""The read model: every read of runs, sessions and their figures that commands show."""
