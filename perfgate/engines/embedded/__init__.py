"""The embedded engine: a miniature EAGLE-3 deployment launched and spoken to like SGLang."""
