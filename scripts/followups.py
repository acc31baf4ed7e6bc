"""Follow-up prompts that need the earlier turn to be understood (#26, point 5), built from LoCoMo dev read in place
(../shared/data/locomo/locomo_dev.json, CC BY-NC: never copied into the repo; only ids and hashes are committed).

Each item is a LoCoMo question (categories 1-4) that names exactly one of its conversation's two speakers, asked as
a follow-up: an earlier user turn names the speaker ("I want to ask you about Caroline."), the agent answers without
naming them, and the follow-up is the question with the name replaced by a pronoun ("What did she research?").
Its gold is the question's evidence turns. The pronoun is taken from a hand-written table (every speaker of the
dev conversations is referred to as she or he by the dataset's own observations); the form from the name's place:
"Caroline's" -> possessive, after an auxiliary ("did Caroline ...") or "that"/"which"/"since" -> subject, after a
preposition or a verb ("to Caroline", "inspired Caroline") -> object. A question where a name's place is none of
these, where the other speaker is named too, whose rewrite still names the speaker, or whose evidence resolves
to no turn, is left out.

Two forms per item: `followup` alone (what the prompt says), and `window`, the text the hook ranks for it: the
follow-up, then the session's earlier pieces newest first, as `cairn_cli.core.ranking.context.build_context_window`
joins them ("<follow-up> assistant: <reply> user: <earlier turn>"). `turns` holds the session (user, assistant,
user) for a benchmark that writes the transcript and builds the window with the hook's own code.

The set is frozen: scripts/followups_manifest.json holds, per item, its ids, category, rewrite rule and template,
and the SHA-256 of the generated item, plus the SHA-256 of the whole set. `load()` rebuilds the set and refuses
it if anything differs; tests/test_followups.py checks the same. Do not change the generator or the manifest:
a benchmark of #26 must be measured on this set as it was committed before any tuning.

    python scripts/followups.py            # build, compare with the manifest, print the counts
    python scripts/followups.py --freeze   # write the manifest (only where none exists)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

import locomo

MANIFEST = Path(__file__).resolve().parent / "followups_manifest.json"
SEED = "cairn-26-followups-v1"

# how the dataset's own observations refer to each dev speaker (he/she counts per speaker); "they" when unsure
PRONOUN_OF = {
    "Caroline": "she",
    "Melanie": "she",
    "Jon": "he",
    "Gina": "she",
    "John": "he",
    "Maria": "she",
    "Joanna": "she",
    "Nate": "he",
    "Tim": "he",
    "Audrey": "she",
    "Andrew": "he",
    "James": "he",
}
FORMS = {  # pronoun -> form -> word
    "she": {"subject": "she", "object": "her", "possessive": "her"},
    "he": {"subject": "he", "object": "him", "possessive": "his"},
    "they": {"subject": "they", "object": "them", "possessive": "their"},
}
# the word before the name decides its form
SUBJECT_AFTER = {
    "did", "does", "do", "didn't", "doesn't", "has", "have", "had", "hasn't", "is", "was", "isn't", "wasn't",
    "would", "will", "might", "could", "can", "should", "may", "must", "that", "which", "since",
}  # fmt: skip
OBJECT_AFTER = {
    "to", "for", "by", "of", "between", "behind", "about", "with", "from", "at", "on", "in", "towards",
    "supports", "motivated", "motivates", "inspired", "inspires", "helps", "help", "made", "impresses",
    "mesmerizes", "invited", "describe", "write",
}  # fmt: skip
# (earlier user turn naming the subject, the agent's reply naming nobody); one per item, by a seeded hash of its id
TEMPLATES = [
    ("I want to ask you about {name}.", "Sure, what would you like to know?"),
    ("Let's talk about {name} for a moment.", "Okay, go ahead."),
    ("I have a question about {name}.", "Sure, ask away."),
    ("Can you help me remember a few things about {name}?", "Of course. What do you want to know?"),
    ("Now I'm curious about {name}.", "Alright, what would you like to know?"),
    ("Next, something about {name}.", "Go ahead."),
]
_SPACE = re.compile(r"\s+")


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _mentions(name: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE) is not None


def rewrite(question: str, name: str, pronoun: str) -> tuple[str, str] | None:
    """(the question with every mention of `name` replaced by the pronoun's form, the forms used joined by "+"),
    or None when a mention's place is not one the rules know."""
    suffix = "(?:'s|’s|')?" if name.endswith("s") else "(?:'s|’s)?"
    out, rules, last = [], [], 0
    for m in re.finditer(rf"\b{re.escape(name)}\b{suffix}", question):
        before = question[: m.start()].split()
        prev = before[-1].strip("\"'“”‘’,;:()").lower() if before else ""
        if m.end() > m.start() + len(name):
            form = "possessive"
        elif not before or prev in SUBJECT_AFTER:
            form = "subject"
        elif prev in OBJECT_AFTER:
            form = "object"
        else:
            return None
        if pronoun == "they" and form == "subject":
            return None  # the verb would have to agree (does -> do, is -> are): not handled
        word = FORMS[pronoun][form]
        out += [question[last : m.start()], word.capitalize() if m.start() == 0 else word]
        rules.append(form)
        last = m.end()
    if not rules:
        return None
    return "".join([*out, question[last:]]), "+".join(rules)


def _template(item_id: str) -> int:
    return int(hashlib.sha256(f"{SEED}/{item_id}".encode()).hexdigest(), 16) % len(TEMPLATES)


def window(followup: str, reply: str, earlier: str) -> str:
    """The hook's context window for the follow-up after one earlier exchange (build_context_window's shape)."""
    return " ".join([followup, f"assistant: {reply}", f"user: {earlier}"])


def build(path: Path = locomo.DATA) -> list[dict]:
    """Every follow-up item, in the data's order (conversation, then question)."""
    items = []
    for conv in locomo.conversations(path):
        speakers = [conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]]
        _, index = locomo.turns_and_index(conv)
        for qa_index, q in enumerate(conv["qa"]):
            category = q.get("category")
            if category not in locomo.CATEGORIES:
                continue
            question = _fold(str(q["question"]))
            named = [s for s in speakers if _mentions(s, question)]
            if len(named) != 1:
                continue
            name = named[0]
            pronoun = PRONOUN_OF.get(name, "they")
            done = rewrite(question, name, pronoun)
            if done is None or _mentions(name, done[0]):
                continue
            followup, rule = done
            turns = locomo.evidence(q, index)
            dia = sorted(
                {f"D{a}:{int(b)}" for e in q.get("evidence") or [] for a, b in locomo.DIA_ID.findall(str(e))}
                & set(index),
                key=lambda d: index[d],
            )
            if not turns:
                continue
            item_id = f"{conv['sample_id']}/q{qa_index}"
            template = _template(item_id)
            earlier, reply = TEMPLATES[template][0].format(name=name), TEMPLATES[template][1]
            items.append(
                {
                    "id": item_id,
                    "sample_id": conv["sample_id"],
                    "qa_index": qa_index,  # position in the conversation's `qa` list (all categories)
                    "category": int(category),
                    "subject": name,
                    "pronoun": pronoun,
                    "rule": rule,
                    "template": template,
                    "question": question,
                    "earlier": earlier,
                    "reply": reply,
                    "followup": followup,
                    "window": window(followup, reply, earlier),
                    "turns": [["user", earlier], ["assistant", reply], ["user", followup]],
                    "evidence": dia,
                    "evidence_turns": sorted(turns),
                }
            )
    return items


def _digest(obj) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    ).hexdigest()


def manifest(items: list[dict], data: Path = locomo.DATA) -> dict:
    """Ids, rules and hashes only: no question or turn text."""
    return {
        "about": "#26 point 5: follow-up prompts built by scripts/followups.py from LoCoMo dev read in place; "
        "frozen before any tuning, do not change",
        "data": "../shared/data/locomo/locomo_dev.json",
        "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
        "seed": SEED,
        "templates": len(TEMPLATES),
        "count": len(items),
        "sha256": _digest(items),
        "items": [
            {
                "id": it["id"],
                "sample_id": it["sample_id"],
                "qa_index": it["qa_index"],
                "category": it["category"],
                "rule": it["rule"],
                "template": it["template"],
                "sha256": _digest(it),
            }
            for it in items
        ],
    }


def dumps(frozen: dict) -> str:
    """The manifest as JSON, one item a line."""
    head = {k: v for k, v in frozen.items() if k != "items"}
    lines = [json.dumps(head, indent=1)[:-2] + ',\n "items": [']
    lines.append(",\n".join("  " + json.dumps(it) for it in frozen["items"]))
    return "\n".join([*lines, " ]\n}\n"])


def differences(items: list[dict], frozen: dict) -> list[str]:
    """What differs between a built set and the frozen manifest (empty: the same set)."""
    built = manifest(items)
    out = []
    if built["data_sha256"] != frozen["data_sha256"]:
        out.append("the data file is not the one the set was frozen on")
    if built["count"] != frozen["count"]:
        out.append(f"{built['count']} items, the manifest has {frozen['count']}")
    have = {it["id"]: it for it in built["items"]}
    want = {it["id"]: it for it in frozen["items"]}
    for key in sorted(have.keys() - want.keys())[:5]:
        out.append(f"{key} is new")
    for key in sorted(want.keys() - have.keys())[:5]:
        out.append(f"{key} is missing")
    out += [f"{key} differs" for key in sorted(have.keys() & want.keys()) if have[key] != want[key]][:5]
    if built["sha256"] != frozen["sha256"]:
        out.append("the whole set's hash differs")
    return out


def load(path: Path = locomo.DATA) -> list[dict]:
    """The frozen set, rebuilt from the data and checked against the manifest (ValueError if it differs)."""
    items = build(path)
    diff = differences(items, json.loads(MANIFEST.read_text()))
    if diff:
        raise ValueError("the follow-up set differs from scripts/followups_manifest.json: " + "; ".join(diff))
    return items


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--freeze", action="store_true", help="write the manifest (refused if one exists)")
    ap.add_argument("--show", type=int, default=0, help="print this many items (to the terminal only)")
    args = ap.parse_args()
    if not locomo.DATA.exists():
        print(f"LoCoMo dev not found at {locomo.DATA}", file=sys.stderr)
        return 1
    items = build()
    by_cat = Counter(locomo.CATEGORIES[it["category"]] for it in items)
    by_conv = Counter(it["sample_id"] for it in items)
    by_rule = Counter(it["rule"] for it in items)
    by_template = Counter(it["template"] for it in items)
    print(f"{len(items)} items; per category {dict(by_cat)}; per conversation {dict(by_conv)}")
    print(f"rules {dict(by_rule)}; templates {dict(sorted(by_template.items()))}")
    for it in items[: args.show]:
        print(f"{it['id']} [{it['rule']}] {it['question']!r} -> {it['window']!r} {it['evidence']}")
    if args.freeze:
        if MANIFEST.exists():
            print(f"{MANIFEST.name} exists: the set is frozen, not rewritten", file=sys.stderr)
            return 1
        MANIFEST.write_text(dumps(manifest(items)))
        print(f"wrote {MANIFEST}")
        return 0
    if MANIFEST.exists():
        diff = differences(items, json.loads(MANIFEST.read_text()))
        print("matches the manifest" if not diff else "DIFFERS from the manifest: " + "; ".join(diff))
        return 1 if diff else 0
    print("no manifest yet (--freeze writes it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
