# Bytecode for Lambda's python3.13, shipped beside the sources: included by every layer's and function's Makefile
# (sam build, BuildMethod makefile). /opt and /var/task are read-only on Lambda, so without it Python compiles every
# module it imports (botocore, Powertools, the X-Ray SDK, ours) at every cold start (docs/ARCHITECTURE.md, "Cold starts").
#
# PYTHON313: a Python 3.13 (bytecode is per minor version; 3.13.x share one magic number). Found as python3.13 on
# PATH, else in pyenv's versions (a pyenv shim that cannot run it is skipped); PYTHON313=... chooses one, and
# PYTHON313= builds sources only. With none, the build still succeeds, sources only, after one warning line.
# --invalidation-mode unchecked-hash: Lambda's Python loads the .pyc without comparing it with the source's
# timestamp (a zip's timestamps cannot be trusted); -s/-p: tracebacks name the file where Lambda has it.
ifndef PYTHON313
PYTHON313 := $(shell for p in "$$(command -v python3.13)" "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.13*/bin/python3.13; do \
	[ -n "$$p" ] && "$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null && { echo "$$p"; break; }; \
	done)
endif

# $(call compile-bytecode,<folder built>,<that folder's path on Lambda>)
define compile-bytecode
	@if [ -n "$(PYTHON313)" ]; then \
		"$(PYTHON313)" -m compileall -q -j 2 --invalidation-mode unchecked-hash -s "$(1)" -p "$(2)" "$(1)" >/dev/null; \
	else \
		echo "warning: no Python 3.13 found (set PYTHON313 to one): $(1) ships sources only, compiled at every cold start" >&2; \
	fi
endef
