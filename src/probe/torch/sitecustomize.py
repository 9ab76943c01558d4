# The PyTorch shim of `lpo trace --torch-ops` (docs/trace.md, PyTorch operators): lpo puts this directory
# first on the traced program's PYTHONPATH, so Python imports this file at startup, before the program.
# It leaves the program untouched and does nothing until the program imports torch; then it turns on
# PyTorch's NVTX emission with input shapes (what torch.autograd.profiler.emit_nvtx(record_shapes=True)
# does, without the torch.cuda.synchronize() that would initialise CUDA at import), so every aten op pushes
# a range "aten::mm, seq = 3, op_id = 57, sizes = [[8, 4096], [4096, 4096]], ..." that lpo's tracer
# records and attributes kernels to. With LPO_TORCH_MODULES=1 (lpo's default) a global forward hook also
# pushes "module:<path>|<Class>" around every nn.Module call. Active only when LPO_TORCH_OPS=1; then the
# sitecustomize this one shadows (if any) runs too.
import os
import sys


def _chain_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        try:
            if not d or os.path.abspath(d) == here:
                continue
        except (TypeError, ValueError):
            continue
        p = os.path.join(d, "sitecustomize.py")
        if os.path.isfile(p):
            import importlib.util

            spec = importlib.util.spec_from_file_location("_lpo_shadowed_sitecustomize", p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return


def _warn(msg):
    sys.stderr.write("lpo trace --torch-ops: %s\n" % msg)


def _enable_nvtx(torch):
    prof = torch.autograd.profiler
    try:
        try:
            prof._run_on_profiler_start()
        except AttributeError:
            pass
        prof._enable_profiler(
            prof.ProfilerConfig(prof.ProfilerState.NVTX, True, False, False, False, False, prof._ExperimentalConfig()),
            set(),
        )
    except Exception:  # another torch: the public context manager (it synchronises, so initialises CUDA)
        try:
            prof.emit_nvtx(record_shapes=True).__enter__()
        except Exception as e:
            _warn("cannot turn on PyTorch's NVTX emission (%s); kernels are traced without operators" % e)


def _enable_modules(torch):
    import weakref

    names = weakref.WeakKeyDictionary()
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop

    def pre(mod, args):
        n = names.get(mod)
        if n is None:  # name the submodules from the first module called (the model): dotted paths
            for sub_name, sub in mod.named_modules():
                if sub not in names:
                    names[sub] = "module:%s|%s" % (sub_name or type(mod).__name__, type(sub).__name__)
            n = names[mod]
        push(n)

    def post(mod, args, out):
        pop()

    reg = torch.nn.modules.module
    reg.register_module_forward_pre_hook(pre)
    try:
        reg.register_module_forward_hook(post, always_call=True)
    except TypeError:
        reg.register_module_forward_hook(post)


def _on_torch(torch):
    _enable_nvtx(torch)
    if os.environ.get("LPO_TORCH_MODULES", "1") == "1":
        try:
            _enable_modules(torch)
        except Exception as e:
            _warn("no module ranges (%s)" % e)


class _TorchImportHook:
    """Runs _on_torch once `import torch` has finished."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _on_torch(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("LPO_TORCH_OPS") == "1":
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImportHook())
_chain_shadowed()
