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

# The real ROS 2 launch libraries for the launch tests: a sourced ROS 2 has them; otherwise the
# Jazzy wheels in RDL_LAUNCH_WHEELS (default ../shared/wheels where it exists; .ci/run passes
# it) are installed, with colcon in $(VENV)/colcon, off the test interpreter's path.
RDL_LAUNCH_WHEELS ?= $(wildcard ../shared/wheels)
LAUNCH_STAMP := $(VENV)/.launch-installed
LAUNCH_WHEELS := launch launch_xml launch_yaml launch_ros launch_testing launch_testing_ros \
	composition_interfaces
ifneq ($(ROS_DISTRO),)
SETUP_STAMPS := $(STAMP)
else ifneq ($(RDL_LAUNCH_WHEELS),)
SETUP_STAMPS := $(STAMP) $(LAUNCH_STAMP)
else
SETUP_STAMPS := $(STAMP)
endif

.PHONY: setup demo test bench soak lint clean

setup: $(SETUP_STAMPS)

$(STAMP): requirements.txt requirements-ros.txt
	test -x $(PY) || python3 -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt $(ROS_REQS)
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

$(LAUNCH_STAMP): $(STAMP) requirements-launch.txt
	$(PY) -m pip install --quiet --no-deps --no-index --find-links $(RDL_LAUNCH_WHEELS) \
		$(LAUNCH_WHEELS)
	$(PY) -m pip install --quiet -r requirements-launch.txt
	$(PY) -m pip install --quiet --target $(VENV)/colcon colcon-common-extensions==0.3.0
	touch $(LAUNCH_STAMP)

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
