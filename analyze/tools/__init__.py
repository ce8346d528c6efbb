"""Subcommands beside the analysis: scrub, diff, whatif (and its acceptance model), the NVTX-only overview."""
