"""cairn: decide which long-term memories an agent sees, label every delivery, learn from the labels."""

# The release: pyproject.toml reads it from here (one place to bump); `cairn --version` prints it. The stores each
# release wrote are recorded in cairn_cli/db/releases.py.
__version__ = "0.2.0"

# The public face (cairn_cli/api.py), imported on first use: `import cairn_cli` stays as cheap as the hook needs.
_API = ("open_store", "Store", "MemoryInput")
TYPE_CHECKING = False
if TYPE_CHECKING:
    from cairn_cli.api import MemoryInput, Store, open_store

__all__ = ["MemoryInput", "Store", "__version__", "open_store"]


def __getattr__(name: str) -> object:
    if name in _API:
        from cairn_cli import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
