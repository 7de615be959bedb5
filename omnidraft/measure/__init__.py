"""How OmniDraft measures itself: rows run interleaved per prompt with rotation, tallied with
paired intervals, each result stamped with the commit and CPU it measured and compared with the
last run of the same suite. Used by `omnidraft bench` (omnidraft/bench/) and by the jobs that
calibrate (jobs/compare.py)."""
