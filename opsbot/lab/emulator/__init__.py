"""SGLang emulator: a stand-in for ``sglang.launch_server`` and ``sglang_router.launch_router``.

A test and training tool, not an inference server. It accepts SGLang's flags, serves SGLang's
HTTP surface with the exact metric names and labels, writes SGLang's log lines, and can be put
into an incident state through a control file. Standard library only: it is copied onto the
lab nodes (as the package ``sglang_emulator``) and runs on their bare python3. Every name and
string comes from SGLang 0.5.12/0.5.23's source (see ../shared/reference/sglang.md beside the checkout).
"""
