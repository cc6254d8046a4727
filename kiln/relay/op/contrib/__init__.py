"""Per-compiler support tables for bring-your-own-codegen: ``dnnl`` (oneDNN), ``clml``.

Each module registers ``"target.<compiler>"`` predicates on the ops it can run and offers
``partition_for_<compiler>(mod, params)``. Import the one you use
(``from kiln.relay.op.contrib.dnnl import partition_for_dnnl``); AnnotateTarget imports it for you.
"""
