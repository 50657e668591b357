# Placeholder until the kind cluster lands (issue 3).
.PHONY: e2e kind-up kind-down
e2e:
	@echo "e2e: not built yet" >&2; exit 1
kind-up kind-down: e2e
