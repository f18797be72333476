"""`make soak`: the whole pipeline for an hour under a seeded schedule of faults, and its report."""
