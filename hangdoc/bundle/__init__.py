"""Bundles as bytes and back: the codec, the checks on what is read, load/save, and the merge of nodes. No analysis."""
