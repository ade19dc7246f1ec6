"""Generation orphans' pure rules: a repo's declared parser and extraction generation and the
chunks of a superseded one (`orphans`), the yield snapshot that is the extraction identity's
authority (`extraction_snapshot`), and one tenant's generation rules over a pass (`tally`)."""
