"""The default rule files, shipped inside the package as `detector.default_rules` (setup.cfg maps this folder).

detector.rules reads them through importlib.resources, from a wheel as from an editable install.
"""
