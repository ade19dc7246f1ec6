"""The demo (`kb-demo`): its dataset (`dataset`, built as plain data and seeded), the
footprint of its last run (`footprint`), its own data folder and its reset (`folder`), and the
same story on a made-up neo.mjs checkout (`neo`, `neo_folder`)."""
