"""Site names: the model's own module addresses (named_modules()); the root is `self`."""

ROOT = "self"
# sites.kind of op calls: the name of the op site kind (SITE_KINDS of the extension, from
# include/tokentrace/kinds.h; test_contracts.py checks it is there).
OP_KIND = "op"


def site_names(model):
    """Ordered {name: module} for every module of `model`, root first as `self`.

    A module registered under two addresses keeps its first one (named_modules() order).
    """
    names = {}
    for name, module in model.named_modules():
        names[name or ROOT] = module
    return names


def is_glob(pattern):
    return any(ch in pattern for ch in "*?[")


# The range site a saved op output's copy runs in (_record/op_saver.py): its ops (detach,
# clone) are not the model's, and its call follows the op whose output it holds
# (_read/op_sites.py finds the op so).
OP_SAVE_SITE = "tokentrace::save"
# The range site of an op-level edit's own ops (_edit/op_edits.py): not the model's ops.
OP_EDIT_SITE = "tokentrace::edit"
