"""What cairn keeps of what users write: secrets redacted and <private> spans removed at every entrance
(redact.py), forgetting on request (forget.py), finding what earlier versions stored (scan.py)."""
