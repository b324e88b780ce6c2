"""TorchLens's intervention helpers, by TorchLens's names and arguments: steer, zero_ablate,
mean_ablate, noise, project_onto, project_off, swap_with, splice_module (and, in
operations.py, scale(factor) and clamp(min=, max=), which are already tokentrace's).

zero_ablate() and mean_ablate(source) of a known tensor are declarative ops (the patch table:
they work under torch.compile and CUDA-graph replay). The others compute from the output, so
they are callable actions: fn(values, *, ctx), run in the module's forward hook, eager only,
counted by the Python counters of the edit report. Each computes out-of-place and returns a
tensor of the output's shape, dtype and device, as TorchLens's do.

TorchLens's force_shape_change= is accepted as False only: tokentrace's edits keep an
output's shape (what is downstream of the site was recorded with it).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .._errors import fail
from .operations import Op, fill, show, zero


def _shape_kept(force_shape_change, name):
    if force_shape_change:
        fail(f"tt.{name}(force_shape_change=True): tokentrace's edits keep the output's shape; "
             f"drop force_shape_change (accepted: False)")


class Helper:
    """A callable action with a name that edit reports and errors print (tt.steer(...)).
    Subclasses define apply(values, ctx)."""

    apply: Any

    def __init__(self, text: str) -> None:
        self.__name__ = text

    def describe(self) -> str:
        return self.__name__

    def __repr__(self) -> str:
        return self.__name__

    def __call__(self, values: torch.Tensor, *, ctx: Any) -> torch.Tensor:
        return self.apply(values, ctx)


def _tensor_of(value, what):
    """A tensor, or the `.out` of anything that has one (a trace's call, a TorchLens op)."""
    if isinstance(value, torch.Tensor):
        return value
    out = getattr(value, "out", None)
    if isinstance(out, torch.Tensor):
        return out
    fail(f"{what} takes a tensor (or an object with a tensor .out, such as trace['site:k']); "
         f"got {type(value).__name__}")


def _aligned(direction, values, feature_axis, what):
    """`direction` shaped to broadcast over `values`: as is when it already does; a 1-D
    direction runs along `feature_axis`."""
    d = direction.to(device=values.device, dtype=values.dtype)
    if d.shape == values.shape:
        return d
    if d.dim() == 1 and values.dim() > 1:
        if feature_axis is None:
            fail(f"{what}: a 1-D direction of {d.shape[0]} on an output of shape "
                 f"{list(values.shape)} needs feature_axis= (the axis it runs along, e.g. -1)")
        axis = feature_axis % values.dim()
        if values.shape[axis] != d.shape[0]:
            fail(f"{what}: the direction has {d.shape[0]} elements, the output's axis "
                 f"{feature_axis} has {values.shape[axis]}")
        return d.reshape([-1] + [1] * (values.dim() - axis - 1))
    try:
        torch.broadcast_shapes(d.shape, values.shape)
    except RuntimeError:
        fail(f"{what}: a direction of shape {list(d.shape)} does not broadcast over the "
             f"output's shape {list(values.shape)}")
    return d


def _check_direction(direction, feature_axis, what, nonzero=False):
    if not isinstance(direction, torch.Tensor):
        fail(f"{what} takes a direction tensor, got {type(direction).__name__}")
    if direction.numel() == 0:
        fail(f"{what}: the direction is empty (shape {list(direction.shape)})")
    if nonzero and not bool(direction.detach().ne(0).any()):
        fail(f"{what}: the direction is all zeros (no component to project on)")
    if feature_axis is not None and (not isinstance(feature_axis, int)
                                     or isinstance(feature_axis, bool)):
        fail(f"{what}: feature_axis= takes an int axis (negative counts from the end), got "
             f"{show(feature_axis)}")


class _Steer(Helper):
    def __init__(self, direction, scale, feature_axis):
        super().__init__(f"tt.steer(direction of shape {list(direction.shape)}, "
                         f"magnitude={scale}, feature_axis={feature_axis})")
        self.direction, self.scale, self.feature_axis = direction, scale, feature_axis

    def apply(self, values, ctx):
        d = _aligned(self.direction, values, self.feature_axis, self.__name__)
        return values + d * self.scale


def steer(direction: torch.Tensor, magnitude: float = 1.0, *, coef: float | None = None,
          feature_axis: int | None = None, force_shape_change: bool = False) -> Helper:
    """out + direction * magnitude (coef= is its other name). A direction of the output's
    shape is added as is; a 1-D one runs along feature_axis= (required then); any other
    shape must broadcast over the output."""
    _shape_kept(force_shape_change, "steer")
    _check_direction(direction, feature_axis, "tt.steer")
    scale = coef if coef is not None else magnitude
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        fail(f"tt.steer: magnitude= (or coef=) takes a number, got {show(scale)}")
    return _Steer(direction.detach(), float(scale), feature_axis)


def zero_ablate(*, force_shape_change: bool = False) -> Op:
    """The output set to zeros: tt.zero() (a declarative op)."""
    _shape_kept(force_shape_change, "zero_ablate")
    return zero()


class _MeanSelf(Helper):
    def apply(self, values, ctx):
        # no .item(): the mean stays on the device (no host read of a device value)
        return values.mean(dtype=torch.float32).to(values.dtype).expand_as(values).clone()


def mean_ablate(source: Any = None, *, over: str = "self",
                force_shape_change: bool = False) -> Op | Helper:
    """Every element set to one mean: of the output itself at that call (source=None; a
    callable, as the mean depends on the batch), or of `source` (a tensor, or anything with
    a tensor .out): then tt.fill(mean), a declarative op."""
    _shape_kept(force_shape_change, "mean_ablate")
    if over != "self":
        fail(f"tt.mean_ablate(over={over!r}): the only accepted value is 'self' (the global "
             f"mean)")
    if source is None:
        return _MeanSelf("tt.mean_ablate()")
    t = _tensor_of(source, "tt.mean_ablate(source)")
    if t.numel() == 0:
        fail("tt.mean_ablate(source): the source is empty; its mean is undefined")
    return fill(float(t.detach().float().mean()))


class _Noise(Helper):
    def __init__(self, std, seed):
        super().__init__(f"tt.noise({std}, seed={seed})")
        self.std = std
        self.generator = None
        if seed is not None:
            self.generator = torch.Generator(device="cpu")
            self.generator.manual_seed(seed)

    def apply(self, values, ctx):
        if self.generator is not None:  # drawn on the CPU so a seed gives the same noise anywhere
            draw = torch.randn(values.shape, generator=self.generator, dtype=torch.float32)
            draw = draw.to(device=values.device, dtype=values.dtype)
        else:
            draw = torch.randn_like(values)
        return values + draw * self.std


def noise(std: float, *, seed: int | None = None, force_shape_change: bool = False) -> Helper:
    """out + Gaussian noise of standard deviation std; seed= gives a private generator (the
    same noise in every run), else torch's global one."""
    _shape_kept(force_shape_change, "noise")
    if not isinstance(std, (int, float)) or isinstance(std, bool) or std < 0:
        fail(f"tt.noise(std) takes a number >= 0, got {show(std)}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        fail(f"tt.noise(seed=) takes an int, got {show(seed)}")
    return _Noise(float(std), seed)


class _Project(Helper):
    def __init__(self, direction, feature_axis, keep):
        name = "project_onto" if keep else "project_off"
        super().__init__(f"tt.{name}(direction of shape {list(direction.shape)}, "
                         f"feature_axis={feature_axis})")
        self.direction, self.feature_axis, self.keep = direction, feature_axis, keep

    def apply(self, values, ctx):
        d = _aligned(self.direction, values, self.feature_axis, self.__name__).expand_as(values)
        if self.feature_axis is None:
            along, norm = (values * d).sum(), (d * d).sum()
        else:
            axis = self.feature_axis % values.dim()
            along = (values * d).sum(dim=axis, keepdim=True)
            norm = (d * d).sum(dim=axis, keepdim=True)
        part = d * (along / norm)  # a zero-norm direction was refused when it was given
        return part if self.keep else values - part


def project_onto(direction: torch.Tensor, *, feature_axis: int | None = None,
                 force_shape_change: bool = False) -> Helper:
    """The output's component along `direction` (summed over feature_axis=, or over every
    element when it is None)."""
    _shape_kept(force_shape_change, "project_onto")
    _check_direction(direction, feature_axis, "tt.project_onto", nonzero=True)
    return _Project(direction.detach(), feature_axis, True)


def project_off(direction: torch.Tensor, *, feature_axis: int | None = None,
                force_shape_change: bool = False) -> Helper:
    """The output less its component along `direction` (see project_onto)."""
    _shape_kept(force_shape_change, "project_off")
    _check_direction(direction, feature_axis, "tt.project_off", nonzero=True)
    return _Project(direction.detach(), feature_axis, False)


class _Swap(Helper):
    def __init__(self, tensor):
        super().__init__(f"tt.swap_with(tensor of shape {list(tensor.shape)})")
        self.tensor = tensor

    def apply(self, values, ctx):
        if self.tensor.shape != values.shape:
            fail(f"{self.__name__}: the output at {ctx.site}:{ctx.call} has shape "
                 f"{list(values.shape)}; a swap keeps the shape")
        return self.tensor.to(device=values.device, dtype=values.dtype)


def swap_with(other: Any, *, force_shape_change: bool = False) -> Helper:
    """The output replaced by `other` (a tensor, or anything with a tensor .out, such as
    another trace's trace['site:k']), cast to the output's device and dtype. A label string
    is refused, as in TorchLens (nothing looks labels up while the model runs)."""
    _shape_kept(force_shape_change, "swap_with")
    if isinstance(other, str):
        fail(f"tt.swap_with({other!r}): pass the tensor (e.g. other_trace[{other!r}].out), not "
             f"a label")
    return _Swap(_tensor_of(other, "tt.swap_with").detach())


class _Splice(Helper):
    def __init__(self, module, input):
        super().__init__(f"tt.splice_module({type(module).__name__}, input={input!r})")
        self.module, self.input = module, input
        self._running = threading.local()

    def apply(self, values, ctx):
        # The spliced module may contain the site (or be it): its own call of the site is
        # left as it is rather than spliced again, which would never end.
        if getattr(self._running, "on", False):
            return values
        self._running.on = True
        try:
            new = (self.module(*ctx.args, **ctx.kwargs) if self.input == "in"
                   else self.module(values))
        finally:
            self._running.on = False
        if not isinstance(new, torch.Tensor):
            fail(f"{self.__name__} returned {type(new).__name__}; it must return a tensor")
        if new.dtype != values.dtype or new.device != values.device:
            fail(f"{self.__name__} returned {new.dtype} on {new.device}; the output is "
                 f"{values.dtype} on {values.device}")
        return new


def splice_module(module: torch.nn.Module, *, input: str = "in", output: str = "out",
                  force_shape_change: bool = False) -> Helper:
    """The output replaced by what `module` returns: called on the site's own arguments
    (input="in") or on its output (input="out"). It must return a tensor of the output's
    dtype and device."""
    _shape_kept(force_shape_change, "splice_module")
    if not callable(module):
        fail(f"tt.splice_module takes a module (or any callable), got {type(module).__name__}")
    if input not in ("in", "out"):
        fail(f"tt.splice_module(input={input!r}): accepted are 'in' (the site's arguments) and "
             f"'out' (its output)")
    if output != "out":
        fail(f"tt.splice_module(output={output!r}): the only accepted value is 'out'")
    return _Splice(module, input)
