# PyInstaller runtime hook (packaging/linux/wren.spec, packaging/windows/wren.spec): runs
# before Wren's code inside the frozen bundle.
#
# torch.compile needs a C++ compiler, torch's headers and Wren's modules as source files,
# none of which the bundle carries; it would fail after spending CPU on the first answers.
# So the bundle decodes eagerly unless the user asks otherwise (WREN_TORCH_COMPILE=on).
import os

os.environ.setdefault("WREN_TORCH_COMPILE", "off")
