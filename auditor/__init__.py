"""The auditor: accounts for every event of a destination by origin, per minute, and archives it."""
