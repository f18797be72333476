"""The auditor: per-minute loss tables, end-to-end lag and availability of each destination, measured independently."""
