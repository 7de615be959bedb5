"""Tools that build or inspect rather than measure, each run as ``python -m omnidraft.tools.NAME``:
``build_adapters`` (the pre-adapted adapters the package ships), ``profile_program`` (an exported
program's time per operator and call width) and ``screenshot_chat`` (the chat page's PNG in docs/)."""
