"""Ordinary training jobs, a fault injector and the matrix that scores hangdoc on them."""
