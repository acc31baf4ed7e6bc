"""A replay run's set-up: its configuration and arms (from the options, or those of the run it resumes) and the
sessions it replays; then the run itself on the backend its configuration names."""

from __future__ import annotations

from collections.abc import Callable

from cairn_cli.config import Settings
from cairn_cli.core.replay.run import ArmSpec, ReplayConfig, execute, get_run, resolve_arms
from cairn_cli.core.replay.sessions import ReplaySession
from cairn_cli.errors import InvalidInput


def configure(
    settings: Settings, options: dict, *, resume: str | None, b_instruction: str | None
) -> tuple[ReplayConfig, tuple[ArmSpec, ArmSpec], list[ReplaySession]]:
    """The configuration, the arms and the sessions of a run. `options`: the ReplayConfig fields the command was
    given (`a` and `b` the versions asked for). A resumed run keeps its own configuration; its caps are this
    invocation's, never inherited."""
    from cairn_cli.core import stats
    from cairn_cli.core.replay.sessions import sessions as find_sessions

    if resume is not None:
        cfg = ReplayConfig(**get_run(resume).config)
        cfg.max_calls, cfg.max_cost_usd = options["max_calls"], options["max_cost_usd"]
        arm_a, arm_b = (ArmSpec(**{k: d[k] for k in ("arm", "version", "rules")}) for d in (cfg.a, cfg.b))
    else:
        arm_a, arm_b = resolve_arms(settings, options["a"], options["b"], b_instruction)
        cfg = ReplayConfig(
            **{
                **options,
                "writer_model": options["writer_model"] or settings.REPLAY_WRITER_MODEL,
                "judge_model": options["judge_model"] or settings.REPLAY_JUDGE_MODEL,
                "a": vars(arm_a),
                "b": {**vars(arm_b), "instruction": b_instruction},
            }
        )
    if cfg.backend == "command" and not cfg.cmd:
        raise InvalidInput("--backend command needs --cmd", "pass --cmd 'PROGRAM ARGS' (it reads the prompt on stdin)")
    found = find_sessions(cfg.transcripts, since=stats.parse_since(cfg.since), limit=cfg.limit)
    return cfg, (arm_a, arm_b), found


def launch(
    found: list[ReplaySession],
    arms: tuple[ArmSpec, ArmSpec],
    cfg: ReplayConfig,
    settings: Settings,
    *,
    timeout: float,
    retries: int,
    embed: Callable,
    run_id: str | None,
    progress: Callable[[int], None] | None,
) -> dict:
    """Replay `found` on the configured backend (`timeout` and `retries` per call) and return the report."""
    from cairn_cli.core.replay.backends import make_backend

    made = make_backend(cfg.backend, cmd=cfg.cmd, base_url=cfg.base_url, timeout_s=timeout, retries=retries)
    return execute(found, arms, cfg, settings, backend=made, embed=embed, run_id=run_id, progress=progress)
