"""Saved evidence read after the fact: bundles (one node each, or thousands folded by class),
Flight Recorder dump files, and the logs a bundle kept; what `hangdoc report` reads."""
