"""Readable kernel names: a CUDA kernel's demangled signature cut to the function it names.

``void at::native::elementwise_kernel<128, 2, ...>(int, ...)`` reads as
``at::native::elementwise_kernel<…>``: the return type, the parameter list and the template
arguments (often hundreds of characters of lambda types) are dropped, the way HTA's
``shorten_name`` does, but the template brackets are kept as ``<…>`` so two instantiations do not
look like one plain function. Short template arguments (``cutlass::Kernel<cutlass_80_..._align1>``)
stay, because they are what tells the variants apart.
"""

from __future__ import annotations

SHORT_TEMPLATE = 64  # template argument text up to this long is kept


def short_kernel_name(name: str) -> str:
    if name.startswith(("Memcpy", "Memset")):
        return name  # "Memcpy HtoD (Pinned -> Device)": the part in brackets is what it copied
    text = name.replace("(anonymous namespace)::", "")
    if text.startswith("void "):
        text = text[5:]
    out: list[str] = []
    depth_angle = depth_paren = 0
    template: list[str] = []
    for ch in text:
        if depth_paren:
            depth_paren += ch == "("
            depth_paren -= ch == ")"
            continue
        if ch == "(" and not depth_angle:
            break  # the parameter list: everything after it is the signature
        if ch == "<":
            depth_angle += 1
            if depth_angle == 1:
                template = []
                continue
        elif ch == ">" and depth_angle:
            depth_angle -= 1
            if depth_angle == 0:
                inner = "".join(template)
                out.append(f"<{inner}>" if len(inner) <= SHORT_TEMPLATE else "<…>")
                continue
        if depth_angle:
            template.append(ch)
        else:
            out.append(ch)
    short = "".join(out).strip()
    return short or name
