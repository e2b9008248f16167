"""Preflight: `hangdoc check` finds tomorrow's hang before the job starts.

Three pipelines, each readable in one function: `check_data` (data lists -> shards ->
partition -> findings), `check_env` (host probes -> findings) and `check_checkpoint`
(safe load -> keys -> what a resume restores -> findings). Their findings carry the
same slugs and fixes (one registry, `hangdoc.registry`) that the live watcher reports.
"""
