"""`perfgate profile`: a torch.profiler trace of a few decode cycles, split by phase.

`capture` launches the server and drives SGLang's ``/start_profile``; `trace` reads the trace
and charges its work to the phases the probe marked; `categories` names the kinds of work;
`render` writes the tables.
"""
