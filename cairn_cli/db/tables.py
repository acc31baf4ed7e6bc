"""The live peewee models. Two databases: the persistent memory store and the ephemeral delivery log.

The schema itself is created by migrations.py (frozen snapshots), never by these classes.
"""

from __future__ import annotations

import peewee

from cairn_cli.clock import utcnow
from cairn_cli.db.fields import JSONField
from cairn_cli.db.instance import writing_instance  # the `instance` columns' default

memory_proxy = peewee.DatabaseProxy()
ephemeral_proxy = peewee.DatabaseProxy()
PROXIES = {"memory": memory_proxy, "ephemeral": ephemeral_proxy}


class _MemoryBase(peewee.Model):
    class Meta:
        database = memory_proxy


class _EphemeralBase(peewee.Model):
    class Meta:
        database = ephemeral_proxy


class Memory(_MemoryBase):
    id = peewee.AutoField()  # peewee's implicit key, spelled out for type checkers
    content = peewee.TextField()
    content_hash = peewee.CharField(max_length=64, index=True)
    norm_hash = peewee.CharField(max_length=64, index=True)
    keywords = JSONField(default=list)
    scope = peewee.CharField(max_length=200, default="global", index=True)
    kind = peewee.CharField(max_length=40, default="fact")
    confidence = peewee.FloatField()
    corroborations = peewee.IntegerField(default=0)
    contradictions = peewee.IntegerField(default=0)
    source_ref = peewee.CharField(max_length=200, null=True)
    session_id = peewee.CharField(max_length=200, null=True)
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)
    superseded_by = peewee.IntegerField(null=True, index=True)
    embedding = peewee.BlobField(null=True)
    embedding_model = peewee.CharField(max_length=200, null=True)
    instance = peewee.CharField(max_length=100, null=True, default=writing_instance)

    class Meta:
        table_name = "memories"


class MemoryMerge(_MemoryBase):
    """A written memory merged into an existing one: what was written and how it matched (nothing lost)."""

    id = peewee.AutoField()
    memory_id = peewee.IntegerField(index=True)
    content = peewee.TextField()
    keywords = JSONField(default=list)
    scope = peewee.CharField(max_length=200)
    kind = peewee.CharField(max_length=40)
    source_ref = peewee.CharField(max_length=200, null=True)
    session_id = peewee.CharField(max_length=200, null=True)
    method = peewee.CharField(max_length=20)  # exact | normalised | semantic
    similarity = peewee.FloatField(null=True)
    merged_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "memory_merges"


class MachineState(_MemoryBase):
    key = peewee.CharField(max_length=200, primary_key=True)
    value = JSONField(null=True)
    updated_at = peewee.DateTimeField(default=utcnow)
    history = JSONField(default=list)

    class Meta:
        table_name = "machine_state"


class ReplayCall(_MemoryBase):
    """One model call of `cairn replay`, by content: key = sha256(backend, model, prompt)."""

    key = peewee.CharField(max_length=64, primary_key=True)
    backend = peewee.CharField(max_length=40)
    model = peewee.CharField(max_length=200)
    role = peewee.CharField(max_length=40)  # writer | judge | coldread
    answer = peewee.TextField()
    input_tokens = peewee.IntegerField()
    output_tokens = peewee.IntegerField()
    run_id = peewee.CharField(max_length=64)  # the run that paid for it
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "replay_calls"


class ReplayRun(_MemoryBase):
    id = peewee.CharField(max_length=64, primary_key=True)
    status = peewee.CharField(max_length=20)  # running | partial | complete | failed
    config = JSONField()
    sent = JSONField()  # which backend received what: calls and tokens per role, redactions
    report = JSONField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "replay_runs"


class StudentVersion(_MemoryBase):
    """A deployed student published to a shared store: its version directory as a tar, and the tar's sha256."""

    name = peewee.CharField(max_length=200, primary_key=True)
    checksum = peewee.CharField(max_length=64)
    size = peewee.BigIntegerField()
    blob = peewee.BlobField()
    card = JSONField()
    instance = peewee.CharField(max_length=100, null=True, default=writing_instance)
    published_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "student_versions"


class MemoryVector(_MemoryBase):
    """A memory's vector from an embedder other than the one its `memories` row holds: a deploy's re-embedding
    under way, or the previous embedder's kept for a rollback (core/store/embedders.py)."""

    id = peewee.AutoField()
    memory_id = peewee.IntegerField()
    embedding_model = peewee.CharField(max_length=200)
    embedding = peewee.BlobField()
    memory_updated_at = peewee.DateTimeField()

    class Meta:
        table_name = "memory_vectors"
        indexes = ((("memory_id", "embedding_model"), True), (("embedding_model",), False))


class MemoryDelivery(_EphemeralBase):
    id = peewee.AutoField()  # peewee's implicit key, spelled out for type checkers
    session_id = peewee.CharField(max_length=200, index=True)
    turn = peewee.IntegerField()
    memory_id = peewee.IntegerField(index=True)
    context_window = peewee.TextField()
    context_key = peewee.CharField(max_length=64, index=True)
    rank = peewee.IntegerField()
    final_score = peewee.FloatField()
    score_components = JSONField()
    reranker_model = peewee.CharField(max_length=200)
    ranker = peewee.CharField(max_length=200, default="cairn")
    layer = peewee.CharField(max_length=100)
    scope = peewee.CharField(max_length=200)
    delivered_at = peewee.DateTimeField(default=utcnow)
    grade = peewee.IntegerField(null=True)
    hard_negative = peewee.BooleanField(null=True)
    graded_at = peewee.DateTimeField(null=True)
    engaged = peewee.BooleanField(null=True)
    engaged_score = peewee.FloatField(null=True)
    engaged_method = peewee.CharField(max_length=40, null=True)
    engaged_lexical = peewee.FloatField(null=True)
    engaged_semantic = peewee.FloatField(null=True)
    engaged_at = peewee.DateTimeField(null=True)
    engaged_backfill = peewee.CharField(max_length=40, null=True)  # the backfill-semantic run that examined it
    arm = peewee.CharField(max_length=10, null=True)
    instance = peewee.CharField(max_length=100, null=True, default=writing_instance)  # the machine that delivered
    grade_propensity = peewee.DoubleField(null=True)  # P(the turn asked for grades); NULL: before demotion, or no hook
    grade_asked = peewee.BooleanField(null=True)  # whether it did; NULL: asked (every turn was, before demotion)
    agent = peewee.CharField(max_length=20, null=True)  # claude | codex | gemini (a hook's turn); NULL: none or older

    class Meta:
        table_name = "memory_deliveries"


class EvidenceApplied(_EphemeralBase):
    """A cu / -! applied for one turn: the unique row is the "applied once" record."""

    id = peewee.AutoField()
    session_id = peewee.CharField(max_length=200)
    turn = peewee.IntegerField()
    memory_id = peewee.IntegerField()
    kind = peewee.CharField(max_length=4)  # cu | -!
    applied_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "evidence_applied"
        indexes = ((("session_id", "turn", "memory_id", "kind"), True),)


class HookState(_EphemeralBase):
    id = peewee.AutoField()  # peewee's implicit key, spelled out for type checkers
    session_id = peewee.CharField(max_length=200)
    turn = peewee.IntegerField()
    arm = peewee.CharField(max_length=10, null=True)
    transcript_path = peewee.TextField(null=True)
    is_subagent = peewee.BooleanField(default=False)
    agent_id = peewee.CharField(max_length=200, null=True)
    context_key = peewee.CharField(max_length=64, null=True)
    data = JSONField(default=dict)
    created_at = peewee.DateTimeField(default=utcnow)
    instance = peewee.CharField(max_length=100, null=True, default=writing_instance)

    class Meta:
        table_name = "hook_state"
        indexes = ((("session_id", "turn"), True),)
