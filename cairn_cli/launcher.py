"""What the agents' hooks run: `<python> -S <this file> hook prompt|stop` (core/hooks/agent_settings.py writes it).

Python's `site` step (site-packages, every `.pth` file: an editable install's import finder alone is ~10 ms, and
the modules it imports) is most of an interpreter's start, and the hot path needs none of it: cairn's hook client is
the standard library and cairn_cli. So the hook runs without it (`-S`) and this file finds cairn_cli by its own
place on disk. The first import of anything else (the fallback when the daemon is down, a Typer command) runs `site`
then, as a plain start would have (the venv, user site, `.pth` files), and goes on: every command works from here,
only the hot path is lighter.

Run as a script, never imported: it is `__main__`, and cairn_cli's own modules do not depend on it.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _LateSite:
    """A last meta-path finder: cairn_cli from this file's place; for any other top-level module the standard
    finders missed, `site.main()` once (site-packages, the venv, `.pth` files) and the path searched again."""

    site_read = False

    @classmethod
    def find_spec(cls, name: str, path=None, target=None):
        if path is not None:  # a submodule: its package's own __path__ finds it
            return None
        if name == "cairn_cli":
            return PathFinder.find_spec(name, [_PARENT])
        if cls.site_read:
            return None
        cls.site_read = True
        import site

        site.main()
        return PathFinder.find_spec(name)  # finders a .pth just added come after this one: they still get a turn


def main() -> None:
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # a script's folder leads sys.path: cairn_cli's own modules are no top-level modules
    if sys.flags.no_site and not any(f is _LateSite for f in sys.meta_path):
        sys.meta_path.append(_LateSite)
    from cairn_cli.entry import main as cairn

    cairn()


if __name__ == "__main__":
    main()
