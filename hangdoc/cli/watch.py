"""`hangdoc watch PID`: placeholder replaced by the real command below."""
