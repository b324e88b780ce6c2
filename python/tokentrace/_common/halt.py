"""TorchLens's halt=: the run ends after the first op or module call a selector chooses.

The rule (an edit rule, tt.when(selector, request)) only asks for the halt; Halted is raised
at the next torch function call an op mode sees (op_mode.py) or the next module call's start
or end (the global module hooks HALT.watch() installs), so that the chosen op's or module's
output is recorded and saved first. Halted is a BaseException: no handler of the model's or
of the edits' takes it; tt.trace catches it and marks the trace halted.
"""

import torch


class Halted(BaseException):
    """The run was ended by halt= (caught by tt.trace)."""


class HaltState:
    def __init__(self):
        self.pending = False  # the rule chose a site: end the run at the next call
        self.fired = False
        self.busy = 0  # > 0 while tokentrace's own work runs (a save's copy): not the model's

    def request(self, out, *, ctx):
        """The halt rule's edit callable: the output unchanged, the halt asked for."""
        self.pending = True
        return out

    def check(self, *args):
        if self.pending and not self.busy:
            self.pending = False
            self.fired = True
            raise Halted()

    def watch(self):
        """Global module hooks that end the run at the next module call after the request;
        returns what removes them."""
        self.pending = self.fired = False
        module = torch.nn.modules.module
        handles = [module.register_module_forward_pre_hook(lambda m, a: self.check()),
                   module.register_module_forward_hook(lambda m, a, o: self.check())]
        return lambda: [h.remove() for h in handles]


HALT = HaltState()  # one run at a time (a trace is one thread's)
