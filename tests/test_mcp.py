"""`cairn mcp`, as an agent uses it: the real server process, spoken to over stdio by the MCP SDK's own client
(ClientSession over stdio_client), the store checked through cairn's own core functions afterwards."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from cairn_cli.config import Settings
from cairn_cli.core.experiment import rules
from cairn_cli.core.store import deliveries, hookstate, memories
from cairn_cli.db.tables import MemoryDelivery
from tests.conftest import ROOT, python_c

TOOLS = {"search_memories", "show_memory", "write_memory", "grade_memories"}
TIMEOUT_S = 300.0  # an upper bound for a loaded 2-core machine (a model loads in the first search), never a wait
# a GitHub token's shape (36 characters after ghp_), made up
TOKEN = "ghp_" + "Zq7Xw2Lk9Vb4Nm8Rt1Yp6Hs3Jd5Gf0Ca2Ue4"

pytestmark = pytest.mark.slow  # every test here starts server processes


class Tools:
    """The client's side of one connection: tool calls that must succeed, and those that must fail."""

    def __init__(self, session: ClientSession):
        self.session = session

    async def call(self, name: str, **arguments: Any) -> dict:
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, _text(result)
        assert json.loads(_text(result)) == result.structured_content  # the text form carries the same
        return result.structured_content

    async def error(self, name: str, **arguments: Any) -> str:
        result = await self.session.call_tool(name, arguments)
        assert result.is_error, result.structured_content
        return _text(result)


def _text(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def client(
    home: Path, script: Callable[[Tools], Awaitable[Any]], *args: str, stderr: Path | None = None, **env: str
) -> Any:
    """Start `cairn mcp *args` for `home` (the fast hashing encoder, models in the server's own process unless
    `env` says otherwise), run `script` against it as one client session, and close it; returns what the script
    returned. The server's stderr goes to `stderr`."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cairn_cli", "mcp", *args],
        env={
            "CAIRN_HOME": str(home),
            "CAIRN_DAEMON": "off",
            "CAIRN_EMBED_MODEL": "hashing",
            "HF_HUB_CACHE": str(home.parent / "hf-empty"),
            "HOME": os.environ["HOME"],
            **env,
        },
        cwd=ROOT,
    )
    with anyio.fail_after(TIMEOUT_S), (stderr or home.parent / "mcp-stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=TIMEOUT_S) as session,
        ):
            await session.initialize()
            return await script(Tools(session))


def connect(home: Path, script: Callable[[Tools], Awaitable[Any]], *args: str, **kwargs: Any) -> Any:
    """`client`, from a test that is not async."""
    return anyio.run(functools.partial(client, home, script, *args, **kwargs))


def rows(session_id: str) -> list[deliveries.DeliveryView]:
    return deliveries.list_deliveries(Settings(), session_id=session_id)


def test_an_agent_writes_searches_shows_and_grades_through_the_real_server(cairn_home):
    async def script(tools: Tools) -> dict:
        listed = await tools.session.list_tools()
        out: dict[str, Any] = {"tools": {t.name: t for t in listed.tools}}
        out["db_up"] = await tools.call(
            "write_memory",
            content="Run make db-up before pytest in the webshop",
            keywords=["pytest", "db-up"],
            kind="procedure",
        )
        out["redis"] = await tools.call(
            "write_memory", content="The webshop caches sessions in Redis on port 6380", keywords=["redis"]
        )
        out["again"] = await tools.call("write_memory", content="Run make db-up before pytest in the webshop")
        out["first"] = await tools.call("search_memories", query="how do I run pytest in the webshop", k=1)
        out["shown"] = await tools.call("show_memory", id=out["db_up"]["id"])
        out["unknown"] = await tools.error("show_memory", id=999)
        # the search showed db_up only: the grade for redis is rejected, the rest applied
        out["graded"] = await tools.call(
            "grade_memories", grades=[{"id": out["db_up"]["id"], "grade": 3}, {"id": out["redis"]["id"], "grade": 2}]
        )
        out["second"] = await tools.call("search_memories", query="where are sessions cached? redis port", k=1)
        out["latest"] = await tools.call("grade_memories", grades=[{"id": out["redis"]["id"], "grade": 1}])
        out["earlier"] = await tools.call("grade_memories", grades=[{"id": out["db_up"]["id"], "grade": 2}], turn=1)
        out["bad"] = await tools.call(
            "grade_memories", grades=[{"id": out["redis"]["id"], "grade": 2, "hard_negative": True}]
        )
        out["out_of_range"] = await tools.error("grade_memories", grades=[{"id": out["redis"]["id"], "grade": 7}])
        out["nothing"] = await tools.call(
            "search_memories", query="how is the billing service deployed?", scope="billing"
        )
        return out

    out = connect(cairn_home, script, "--scope", "webshop")
    assert set(out["tools"]) == TOOLS
    grade_schema = out["tools"]["grade_memories"].input_schema
    assert grade_schema["$defs"]["GradeItem"]["properties"]["grade"]["maximum"] == 3
    db_up, redis = out["db_up"]["id"], out["redis"]["id"]
    session = out["first"]["session"]
    assert session.startswith("mcp-") and out["db_up"]["session"] == session
    # the Stop's write path: a new memory, then an exact repeat merged into it, stamped with the rules' version
    version = rules.live(Settings()).version
    assert out["db_up"]["action"] == "added" and out["db_up"]["source_ref"] == version
    assert (out["again"]["id"], out["again"]["action"], out["again"]["method"]) == (db_up, "merged", "exact")
    shown = out["shown"]
    assert shown["content"] == "Run make db-up before pytest in the webshop"
    assert (shown["scope"], shown["kind"], shown["keywords"]) == ("webshop", "procedure", ["pytest", "db-up"])
    assert (shown["source_ref"], shown["session_id"], shown["superseded_by"]) == (version, session, None)
    assert [m["method"] for m in shown["merges"]] == ["exact"]
    assert "no memory with id 999" in out["unknown"] and "search_memories" in out["unknown"]
    # each search is a turn of the session; a grade lands on what that search showed
    first = out["first"]
    assert first["turn"] == 1 and [m["id"] for m in first["memories"]] == [db_up] and first["abstained"] is None
    assert set(first["memories"][0]) == {"id", "content", "kind", "scope", "score", "rank"}
    assert out["graded"]["turn"] == 1 and [a["id"] for a in out["graded"]["applied"]] == [db_up]
    assert [(r["id"], r["reason"]) for r in out["graded"]["rejected"]] == [
        (redis, f"memory {redis} was not delivered in turn 1")
    ]
    assert out["second"]["turn"] == 2 and [m["id"] for m in out["second"]["memories"]] == [redis]
    assert out["latest"]["turn"] == 2 and out["earlier"]["turn"] == 1
    assert out["bad"]["applied"] == [] and "hard negative" in out["bad"]["problems"][0]
    assert "less than or equal to 3" in out["out_of_range"]
    nothing = out["nothing"]
    assert (nothing["turn"], nothing["memories"], nothing["abstained"]) == (3, [], "abstained: no memory in scope")
    assert nothing["notes"] == ["scope 'billing' has no memories yet: global memories only"]
    logged = rows(session)
    assert [(d.turn, d.memory_id, d.grade) for d in logged] == [(1, db_up, 2), (2, redis, 1)]
    assert {(d.layer, d.agent, d.scope, d.hard_negative) for d in logged} == {("mcp", "mcp", "webshop", False)}
    assert hookstate.turn_prompt(session, 1) == "how do I run pytest in the webshop"


def test_secrets_in_writes_and_queries_never_reach_the_store(cairn_home, tmp_path):
    async def script(tools: Tools) -> dict:
        return {
            "partly": await tools.error(
                "write_memory", content=f"The staging deploy authenticates with {TOKEN} from the CI runner"
            ),
            "mostly": await tools.error("write_memory", content=TOKEN),
            "kept": await tools.call(
                "write_memory",
                content="Deploys run from CI on tags <private>the runner is my laptop at home</private>",
                keywords=["deploy", TOKEN],
                scope="webshop",
            ),
            "search": await tools.call("search_memories", query=f"the deploy fails with token {TOKEN}: why?"),
            "private": await tools.error("search_memories", query="<private>only this</private>"),
        }

    stderr = tmp_path / "server.err"
    out = connect(cairn_home, script, stderr=stderr)
    assert "holds a credential and was not stored" in out["partly"] and "where it lives" in out["partly"]
    assert "mostly a secret (github-token) and was not stored" in out["mostly"]
    kept = memories.get_memory(out["kept"]["id"], Settings())
    assert kept.content == "Deploys run from CI on tags" and kept.keywords == ["deploy"]
    assert [m.id for m in memories.list_memories(Settings())] == [kept.id]
    session, turn = out["search"]["session"], out["search"]["turn"]
    assert [m["id"] for m in out["search"]["memories"]] == [kept.id]
    window = MemoryDelivery.get(MemoryDelivery.session_id == session).context_window
    assert window == "the deploy fails with token [redacted:github-token]: why?"
    assert hookstate.turn_prompt(session, turn) == "the deploy fails with token [redacted:github-token]: why?"
    assert "query is empty (or only a <private> span)" in out["private"]
    files = [p for p in cairn_home.rglob("*") if p.is_file()] + [stderr]
    assert not [p for p in files if TOKEN.encode() in p.read_bytes() or b"my laptop" in p.read_bytes()]


def test_the_session_id_is_the_clients_else_one_per_server_process(cairn_home):
    async def write_and_search(tools: Tools) -> dict:
        content = "Production deploys need a tagged release and a manual approval"
        written = await tools.call("write_memory", content=content, kind="procedure")
        return {"written": written, **await search(tools)}

    async def search(tools: Tools) -> dict:
        return await tools.call("search_memories", query="how are production deploys released?")

    async def grade_then_search(tools: Tools) -> dict:
        grade = [{"id": memory_id, "grade": 3}]
        return {
            "unsearched": await tools.error("grade_memories", grades=grade),
            "by_turn": await tools.call("grade_memories", grades=grade, turn=1),
            "search": await search(tools),
        }

    async def two_at_once() -> tuple[dict, dict]:
        out: dict[str, dict] = {}

        async def run(name: str, script: Callable[[Tools], Awaitable[dict]]) -> None:
            out[name] = await client(cairn_home, script)

        async with anyio.create_task_group() as group:
            group.start_soon(run, "a", write_and_search)
            group.start_soon(run, "b", search)
        return out["a"], out["b"]

    # no id from the client: a session of its own per process, two connections at once included
    a, b = anyio.run(two_at_once)
    memory_id = a["written"]["id"]
    assert a["written"]["session"] == a["session"] != b["session"]
    assert a["session"].startswith("mcp-") and b["session"].startswith("mcp-") and a["turn"] == b["turn"] == 1
    # the client's id (CAIRN_MCP_SESSION, or --session): its turns go on from one server process to the next, and a
    # grade names the turn it is for (this process has searched nothing yet: no latest search to default to)
    first = connect(cairn_home, search, CAIRN_MCP_SESSION="agent-7")
    second = connect(cairn_home, grade_then_search, "--session", "agent-7")
    assert (first["session"], first["turn"]) == ("agent-7", 1) and [m["id"] for m in first["memories"]] == [memory_id]
    assert "no search on this connection to grade yet" in second["unsearched"]
    assert second["by_turn"]["turn"] == 1 and [g["id"] for g in second["by_turn"]["applied"]] == [memory_id]
    assert (second["search"]["session"], second["search"]["turn"]) == ("agent-7", 2)
    assert [(d.turn, d.grade, d.layer, d.agent) for d in rows("agent-7")] == [
        (1, 3, "mcp", "mcp"),
        (2, None, "mcp", "mcp"),
    ]


def test_a_missing_store_is_a_tool_error_naming_the_fix_and_the_server_goes_on(cairn_home, tmp_path):
    (tmp_path / "later").mkdir()
    url = f"sqlite:///{tmp_path / 'later' / 'memory.db'}"
    init = [sys.executable, "-m", "cairn_cli", "db", "init", url, "--store", "memory"]

    async def script(tools: Tools) -> dict:
        missing = await tools.error("search_memories", query="where do deploys run from?")
        made = await anyio.run_process(init, env={**os.environ, "CAIRN_HOME": str(cairn_home)}, cwd=ROOT)
        written = await tools.call("write_memory", content="Deploys run from CI on tags")
        return {"missing": missing, "made": made.returncode, "written": written}

    out = connect(cairn_home, script, CAIRN_DB_URL=url)
    assert f"no memory store at {tmp_path / 'later' / 'memory.db'}" in out["missing"]
    assert f"`cairn db init {url} --store memory`" in out["missing"]
    assert out["made"] == 0 and out["written"]["action"] == "added"


def test_searches_and_writes_go_through_a_running_daemon(tmp_path):
    """With the daemon up (CAIRN_DAEMON=auto) the server ranks and embeds there, as the hooks do."""
    from tests.test_daemon import daemon_pids, make_home, run, start, status

    home = make_home(tmp_path)

    async def script(tools: Tools) -> dict:
        return {
            "search": await tools.call(
                "search_memories", query="the integration tests fail with connection refused", scope="webshop"
            ),
            "write": await tools.call(
                "write_memory", content="The webshop's integration tests need make db-up first", scope="webshop"
            ),
        }

    try:
        start(home)
        out = connect(home, script, CAIRN_DAEMON="auto", CAIRN_DAEMON_TIMEOUT_MS="60000")
        ops = status(home)[1]["ops"]
    finally:
        run(home, "daemon", "stop", "--force")
        for pid in daemon_pids(home):
            os.kill(pid, 9)
    search = out["search"]
    assert search["memories"][0]["id"] == 1 and not [n for n in search["notes"] if n.startswith("fallback")]
    assert ops.get("rank") == 1 and ops.get("embed") == 1 and out["write"]["action"] == "added"
    logged = json.loads(run(home, "deliveries", "--session", search["session"], "--json").stdout)
    assert {(d["layer"], d["agent"], d["turn"]) for d in logged} == {("mcp", "mcp", 1)}


def test_the_real_model_finds_a_paraphrase_and_merges_a_near_copy(cairn_home, real_model):
    async def script(tools: Tools) -> dict:
        return {
            "first": await tools.call(
                "write_memory", content="Run make db-up before pytest in the webshop", scope="webshop"
            ),
            "near": await tools.call(
                "write_memory", content="Run make db-up before running pytest in the webshop", scope="webshop"
            ),
            "other": await tools.call(
                "write_memory", content="Prices are stored as integer cents in the checkout", scope="webshop"
            ),
            "search": await tools.call(
                "search_memories", query="which command must run before the webshop test suite?", scope="webshop"
            ),
        }

    out = connect(cairn_home, script, CAIRN_EMBED_MODEL="all-MiniLM-L6-v2")
    near = out["near"]
    assert (near["id"], near["action"], near["method"]) == (out["first"]["id"], "merged", "semantic")
    assert near["similarity"] > 0.9 and out["other"]["action"] == "added"
    assert out["search"]["memories"][0]["id"] == out["first"]["id"]
    assert memories.get_memory(out["first"]["id"], Settings()).embedding_model == "all-MiniLM-L6-v2"


def test_cairn_help_never_imports_the_mcp_sdk():
    code = (
        "import sys\nfrom cairn_cli.cli import main\nsys.argv = ['cairn', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('MCP', [m for m in sys.modules if m.split('.')[0] == 'mcp'])"
    )
    out = python_c(code)
    assert out.returncode == 0 and "MCP []" in out.stdout, out.stdout + out.stderr
