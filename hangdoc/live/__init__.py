"""The live side: the probes, the watch loop, `run`'s runner, process control, and the offline inputs."""
