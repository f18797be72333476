"""The retrier's dashboard: the page operators keep open during an incident, served on its ops port.

`access` decides who may read dead letters and who may act, `api` answers the page's requests,
`replay_jobs` runs replays without holding up the retrier's own work, `auditor_feed` brings the
loss and lag of every minute from a running auditor, `runbook` links the panels to their
alerts' entries, and `static/` is the page itself (no CDN).
"""
