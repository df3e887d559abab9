# One-command setup: every target creates .venv on first use.
# `make demo` runs the main job, `make test` the test suite (what CI runs), `make bench` the benchmarks.
# `make soak` (not in CI): 10 min of arm_sim + dynamics_learner at 1 kHz; SOAK_ARGS='--seconds 60' shortens it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A sourced system ROS 2 (ROS_DISTRO set) provides rclpy and messages; otherwise the PyPI wheels do.
ifdef ROS_DISTRO
VENV_FLAGS := --system-site-packages
ROS_REQS :=
else
VENV_FLAGS :=
ROS_REQS := -r requirements-ros.txt
endif

.PHONY: setup demo test bench soak lint clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-ros.txt
	test -x $(PY) || python3 -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt $(ROS_REQS)
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

demo: setup
	$(PY) -m robot_dynamics_learning.demo

test: setup
	$(PY) -m pytest -q test

bench: setup
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) -m bench.run_all

soak: setup
	$(PY) -m bench.soak $(SOAK_ARGS)

lint: setup
	$(PY) -m pytest -q test -m linter

clean:
	rm -rf $(VENV) build install log *.egg-info
