"""
Managed (lifecycle) nodes that configure and activate themselves unless told to wait.

ros2_control and nav2 users drive nodes that command or publish to a controller through
configure / activate / deactivate / cleanup (`lifecycle_msgs` services, `ros2 lifecycle`).
With `autostart` true (the default) a node walks to active at start, so launch files and
tests that expect a running node keep working; false leaves it unconfigured for a manager.
"""
from typing import Optional

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from robot_dynamics_learning.nodes.parameters import declare

SUCCESS = TransitionCallbackReturn.SUCCESS
FAILURE = TransitionCallbackReturn.FAILURE


class ManagedNode(LifecycleNode):
    """
    A lifecycle node whose subclasses implement `configure`, `activate`, `deactivate`, `cleanup`.

    Parameters are declared in the constructor (once); `configure` builds what the node needs
    (a model, a solver), `cleanup` frees it. `active` gates the node's output: callbacks
    return at once while it is False. rclpy turns an exception in a transition callback into
    an ERROR transition without saying why, so `configure` errors are logged and, at
    autostart, raised (a refused parameter or file ends the process as before).
    """

    def __init__(self, node_name: str, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, 'autostart', True, 'configure and activate at start; false: stay '
                'unconfigured until a lifecycle manager (or `ros2 lifecycle set`) moves it')
        self.active = False
        self.configured = False
        self._failure: Optional[Exception] = None

    def autostart(self) -> None:
        """Configure and activate now when `autostart` is true (call at the end of __init__)."""
        if not self.get_parameter('autostart').value:
            return
        if self.trigger_configure() != SUCCESS:
            raise self._failure or RuntimeError(f'{self.get_name()} failed to configure')
        if self.trigger_activate() != SUCCESS:
            raise RuntimeError(f'{self.get_name()} failed to activate')

    def configure(self) -> None:
        """Build what the node needs to run (raise ValueError naming what is wrong)."""

    def activate(self) -> None:
        """Start producing output."""

    def deactivate(self) -> None:
        """Stop producing output (a controller: leave the plant safe)."""

    def cleanup(self) -> None:
        """Free what `configure` built."""

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Run `configure`; a failure is logged and leaves the node unconfigured."""
        try:
            self.configure()
        except (ValueError, FileNotFoundError, OSError) as error:
            self._failure = error
            self.get_logger().error(f'configure failed: {error}')
            return FAILURE
        self.configured = True
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Run `activate`, then let output through."""
        self.activate()
        self.active = True
        self.get_logger().info('active')
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop output first, then run `deactivate`."""
        self.active = False
        self.deactivate()
        self.get_logger().info('inactive')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Run `cleanup`: back to unconfigured."""
        self.cleanup()
        self.configured = False
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Leave safely from any state: deactivate, then clean up."""
        if self.active:
            self.active = False
            self.deactivate()
        if self.configured:
            self.cleanup()
            self.configured = False
        return super().on_shutdown(state)
