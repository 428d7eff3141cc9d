# The two entry points of a fresh clone (see README): `make sim` and `make test`.
.PHONY: setup test sim clean
setup:
	./scripts/setup.sh
test:
	./scripts/test.sh
sim:
	./scripts/sim.sh
clean:
	rm -rf .venv .venv-robocasa build
