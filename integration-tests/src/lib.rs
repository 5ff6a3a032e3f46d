//! Nothing to use here: this package holds the multi-process tests under
//! `tests/` and the peer programs they spawn under `src/bin/`.
