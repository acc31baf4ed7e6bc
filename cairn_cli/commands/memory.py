"""`cairn memory ...`: the persistent memory store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, opened_settings
from cairn_cli.core.ids import GLOBAL_SCOPE


def add(
    content: Annotated[str, typer.Argument(help="The memory's text.")],
    keywords: Annotated[str | None, typer.Option("--keywords", "-k", help="Comma-separated keywords.")] = None,
    scope: Annotated[str, typer.Option(help="Project or area the memory belongs to.")] = GLOBAL_SCOPE,
    kind: Annotated[
        str, typer.Option(help="fact, procedure, correction, preference, decision, pitfall or meta.")
    ] = "fact",
    source_ref: Annotated[
        str | None, typer.Option("--source-ref", help="Generation-prompt version that wrote it.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="Session that wrote it.")] = None,
    json: Json = False,
) -> None:
    """Add one memory (merges into an identical one, or a near-duplicate of its scope: keywords are unioned).

    Example: cairn memory add "Run tests with make test" --keywords make,tests --scope cairn --kind procedure
    """
    from cairn_cli.core.store import dedup, memories

    entry = memories.validate_entry(
        {
            "content": content,
            "keywords": keywords or [],
            "scope": scope,
            "kind": kind,
            "source_ref": source_ref,
            "session_id": session,
        }
    )
    from cairn_cli.daemon.dispatch import embed_daemon_first

    notes: list[str] = []
    result = dedup.add_memories([entry], opened_settings(create=True), embed=embed_daemon_first, notes=notes)[0]
    for note in notes:
        output.message(note)
    if json:
        output.json_out(result)
    else:
        extra = (
            f" (+keywords {', '.join(result.keywords_added)})"
            if result.action == "merged" and result.keywords_added
            else ""
        )
        how = f" ({result.method}, cosine {result.similarity:.3f})" if result.similarity is not None else ""
        output.text_out(f"{result.action} memory {result.id}{how}{extra}")


def import_(
    file: Annotated[Path, typer.Argument(help="JSONL file: one {content, keywords, scope, kind, source_ref} a line.")],
    source_ref: Annotated[
        str | None, typer.Option("--source-ref", help="Default source_ref for lines without one.")
    ] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Import the valid lines, report the rest.")
    ] = False,
    json: Json = False,
) -> None:
    """Import memories from JSONL; reports added / merged / rejected lines.

    Example: cairn memory import memories.jsonl --source-ref gen-v3
    """
    from cairn_cli.core.store import importing
    from cairn_cli.daemon.dispatch import embed_daemon_first

    with output.progress(importing.lines_to_import(file), "importing") as tick:
        report = importing.import_jsonl(
            file,
            opened_settings(create=True),
            source_ref=source_ref,
            skip_invalid=skip_invalid,
            progress=tick,
            embed=embed_daemon_first,
        )
    output.json_out(report.as_dict()) if json else _show_import(report)


def _show_import(report) -> None:
    semantic = sum(r.method == "semantic" for r in report.results)
    output.text_out(
        f"added {report.added}, merged {report.merged} ({semantic} near-duplicates), rejected {len(report.rejected)}"
    )
    for note in report.notes:
        output.message(note)
    for no, reason in report.rejected:
        output.message(f"line {no}: {reason}")


def list_(
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include superseded memories.")] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    json: Json = False,
) -> None:
    """List memories.

    Example: cairn memory list --scope cairn --json
    """
    from cairn_cli.core.store import memories

    views = memories.list_memories(
        opened_settings(read_only=True), scope=scope, kind=kind, include_superseded=all_, limit=limit
    )
    if json:
        output.json_out(views)
        return
    output.table(
        [{**vars(v), "keywords": ", ".join(v.keywords), "confidence": f"{v.confidence:.2f}"} for v in views],
        ["id", "scope", "kind", "confidence", "content", "keywords", "source_ref", "superseded_by"],
        title=f"{len(views)} memories",
        widths={"content": 60},
    )


def show(memory_id: Annotated[int, typer.Argument(help="Memory id.")], json: Json = False) -> None:
    """Show one memory with all its fields and every write merged into it (its text, how it matched).

    Example: cairn memory show 12
    """
    from cairn_cli.core.store import memories, merges

    settings = opened_settings(read_only=True)
    view, merged = memories.get_memory(memory_id, settings), merges.merges_of(memory_id, settings)
    if json:
        output.json_out({**vars(view), "merges": merged})
        return
    output.key_values({**vars(view), "keywords": ", ".join(view.keywords)}, title=f"memory {view.id}")
    if merged:
        output.table(
            [{**vars(m), "keywords": ", ".join(m.keywords)} for m in merged],
            ["merged_at", "method", "similarity", "content", "keywords", "source_ref", "session_id"],
            title=f"{len(merged)} writes merged into memory {view.id}",
            widths={"content": 60},
        )


def supersede(
    old: Annotated[int, typer.Argument(help="The memory that is replaced.")],
    new: Annotated[int, typer.Argument(help="The memory that replaces it.")],
    json: Json = False,
) -> None:
    """Mark OLD as superseded by NEW: OLD never ranks again.

    Example: cairn memory supersede 12 40
    """
    from cairn_cli.core.store import memories

    view = memories.supersede(old, new, opened_settings())
    output.json_out(view) if json else output.text_out(f"memory {old} is superseded by {new}")


def _evidence(ids: list[int], json: bool, corroborate: bool) -> None:
    from cairn_cli.core.store import evidence

    views = evidence.record_evidence(ids, opened_settings(), corroborate=corroborate)
    if json:
        output.json_out(views)
    else:
        for v in views:
            output.text_out(
                f"memory {v.id}: confidence {v.confidence:.2f} "
                f"({v.corroborations} corroborated, {v.contradictions} contradicted)"
            )


def corroborate(ids: Annotated[list[int], typer.Argument(help="Memory ids.")], json: Json = False) -> None:
    """Record that memories were confirmed (raises confidence).

    Example: cairn memory corroborate 12 15
    """
    _evidence(ids, json, True)


def contradict(ids: Annotated[list[int], typer.Argument(help="Memory ids.")], json: Json = False) -> None:
    """Record that memories were contradicted (lowers confidence).

    Example: cairn memory contradict 12
    """
    _evidence(ids, json, False)


def embed(json: Json = False) -> None:
    """Embed the memories that lack an embedding from the live embedder (after changing CAIRN_EMBED_MODEL), and
    finish a learned embedder's pending deploy (its re-embed and swap: what the daemon does; cron-friendly).

    Example: cairn memory embed
    """
    from cairn_cli.core.store import embedders

    settings = opened_settings()
    with output.progress(None, "re-embedding") as tick:
        swapped = embedders.finish_pending(settings, progress=tick)
    with output.progress(None, "embedding") as tick:
        n = embedders.embed_missing(settings, progress=tick)
    if json:
        output.json_out({"embedded": n, "embedder": embedders.live_name(settings), "swap": swapped})
    else:
        if swapped:
            output.message(swapped)
        output.text_out(f"embedded {n} memories")


def export(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file (created 0600); default: stdout.")
    ] = None,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include superseded memories.")] = False,
) -> None:
    """Write the store as the JSONL `cairn memory import` reads (the round-trip keeps everything a user wrote).

    Example: cairn memory export --out memories.jsonl
    """
    import json as json_lib

    from cairn_cli.core.store import editing

    opened = opened_settings(read_only=True)
    del opened  # the stores are bound; the entries are read from them
    lines = (
        json_lib.dumps(e, ensure_ascii=False) + "\n"
        for e in editing.export_entries(scope=scope, include_superseded=all_)
    )
    if out is None:
        for line in lines:
            output.text_out(line.rstrip("\n"))
        return
    from cairn_cli.files import atomic_write

    text = "".join(lines)
    atomic_write(out, text, mode=0o600)
    output.message(f"exported {text.count(chr(10))} memories to {out}")


def edit(
    memory_id: Annotated[int, typer.Argument(help="Memory id.")],
    content: Annotated[str | None, typer.Option("--content", help="The memory's new text.")] = None,
    keywords: Annotated[str | None, typer.Option("--keywords", "-k", help="Its new comma-separated keywords.")] = None,
    json: Json = False,
) -> None:
    """Change one memory's text or keywords: re-embedded and re-indexed; the old text is kept as a merge record
    (`cairn memory show ID`) unless `cairn forget` removes it.

    Example: cairn memory edit 12 --content "Run the tests with make test-fast" --keywords make,tests
    """
    from cairn_cli.core.store import editing
    from cairn_cli.daemon.dispatch import embed_daemon_first

    kws = None if keywords is None else [k for k in keywords.split(",") if k.strip()]
    view = editing.edit(memory_id, opened_settings(), content=content, keywords=kws, embed=embed_daemon_first)
    output.json_out(view) if json else output.text_out(f"edited memory {view.id}: {view.content}")
