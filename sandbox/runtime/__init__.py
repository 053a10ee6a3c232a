"""The plumbing under the sandbox's API: the processes that hold notebook states and what bounds them on Linux.

The API (``sandbox.Sandbox``, ``State``, ``Execution``, ``SandboxConfig``) lives one folder up and is all a caller
needs; it uses these modules, and they never reach back into it (``.importlinter`` holds them to that).

- ``base``: what both backends share: the ``Runtime`` protocol the Sandbox drives, ``RawResult``, the runtime
  errors, the cells' environment (``runtime_env``), memory reads (``uss_bytes``, ``pss_bytes``).
- ``fork``: the fork backend, host side: the ``Zygote`` and ``ForkRuntime`` handles.
- ``_server``: the fork backend's runtime process, run by path (``python .../runtime/_server.py``); it imports no
  module of this package and loads ``protocol`` and ``limits`` by path from this folder.
- ``protocol``: length-prefixed JSON frames (with descriptors) between the host and ``_server``.
- ``kernel``: the kernel backend (any Jupyter kernel through ``jupyter_client``, branches by replay).
- ``launcher``: starts the zygote without forking the host.
- ``isolation``: the bubblewrap plan and the Landlock probe.
- ``limits``: rlimits, niceness, and the pids / memory / cpu cgroups of a sandbox and of its states.
- ``workspace``: the folders on disk (inputs, one working folder per state) and reads of a state's files.
- ``budget``: the process-wide memory budget that every sandbox joins (``sandbox.MemoryBudget``).
"""
