"""The patch table of a bound spec: one entry per (op rule, table selector), built at bind.

A bad entry comes back from the library as data (torch_library.PatchEntryError: entry index,
reason, message) and is reported on the rule the entry belongs to.
"""

import torch

from .._backend import torch_library
from .._errors import fail

# Entries of one table: a calls= list of scattered calls or tokens makes one entry per run.
MAX_ENTRIES = 4096


class TableEntries:
    """The entries of one spec's table, and the rule each belongs to (entry_rule)."""

    def __init__(self):
        self.entries = []     # (site id, op, box, table selector)
        self.entry_rule = []  # entry -> rule index

    def add(self, rule_error, i, rule, site_id, box, selectors=None):
        """Entries for op rule `i` at table site `site_id` (with `selectors`, or those of the
        rule's calls); rule_error(i, message) on a problem."""
        if selectors is None:
            selectors = rule.calls.table_selectors()
        if len(self.entry_rule) + len(selectors) > MAX_ENTRIES:
            if len(selectors) > 1:
                why = (f"its calls= selects {len(selectors)} separate runs of calls or tokens "
                       f"at each site (one entry each); use ranges")
            else:
                why = ("the rules and the sites they select need more entries than the patch "
                       "table takes (one per rule and site, for each run of calls); select "
                       "fewer sites, or merge rules")
            rule_error(i, f"{why} (the table takes {MAX_ENTRIES} entries; "
                          f"{len(self.entry_rule)} came before this one)")
        for sel in selectors:
            self.entries.append((site_id, rule.action, box, sel))
            self.entry_rule.append(i)

    def build(self, num_sites, device, rule_error, max_masks=0, max_rows=0):
        """The native table on `device`, with `max_masks` row masks of `max_rows` rows (rules
        for served requests: requests.py); a refused entry is rule_error(its rule, why)."""
        table = torch_library.PatchTable(num_sites, max_masks=max_masks, max_rows=max_rows)
        for site_id, op, box, sel in self.entries:
            args = dict(op.table_args())
            if isinstance(args.get("operand"), torch.Tensor) and \
                    args["operand"].dtype == torch.float64:
                args["operand"] = args["operand"].float()  # ops compute in float32 anyway
            table.add_entry(site_id, op.name, index=box, calls=sel, **args)
        try:
            table.upload(device)
        except torch_library.PatchEntryError as exc:
            rule_error(self.entry_rule[exc.entry], exc.message)
        except RuntimeError as exc:  # not an entry's fault (no CUDA device, ...): one line
            fail(str(exc).splitlines()[0].removeprefix("tokentrace: "))
        return table
