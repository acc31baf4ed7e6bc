"""cairn: decide which long-term memories an agent sees, label every delivery, learn from the labels."""

# The release: pyproject.toml reads it from here (one place to bump); `cairn --version` prints it. The stores each
# release wrote are recorded in cairn_cli/db/releases.py.
__version__ = "0.2.0"
