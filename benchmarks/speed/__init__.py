"""Speed checks: the wall time of perfmodel's searches, the PaSE DP and sweeps, and of the bash readers' front end
against tree-sitter-bash (bash_readers)."""
