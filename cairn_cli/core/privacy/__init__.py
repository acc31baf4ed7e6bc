"""What the user asks cairn to stop keeping, after the fact: `cairn forget` (forget.py) and `cairn redact --scan`
(scan.py), both walking every place cairn keeps text (stored.py). The redaction every entrance applies first is
core/redact.py."""
