"""The offline write-side A/B (`cairn replay`)."""
