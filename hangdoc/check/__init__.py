"""Preflight: `hangdoc check` finds tomorrow's hang before the job starts.

Three pipelines, each readable in one function: `check_data` (data lists -> shards ->
partition -> findings), `check_env` (host probes -> findings) and `check_checkpoint`
(safe load -> keys -> what a resume restores -> findings). Their findings are built from
`hangdoc.model.Rule` records, the live rules' own where the watcher reports the same slug;
`hangdoc.registry` gathers every record for `hangdoc rules` and `hangdoc explain`.
"""
