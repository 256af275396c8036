.PHONY: check demo
check:
	bash scripts/check.sh
demo:
	bash scripts/demo.sh
