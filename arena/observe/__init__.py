"""What happened: request logs, statistics, memory snapshots and event logs, profiles
recorded during warm-up, and their report and plot."""
