"""Trinity Studio: the config generator of the developer guide (``trinity studio``).

The modules live at the paths the guide names (``trinity.manager.config_manager``,
``trinity.manager.config_registry.*``) so that code written from the guide's "Adding New Config
Entries for the Config Generator" section runs unchanged. They need Streamlit, which comes with
the ``studio`` extra: ``pip install 'trinity-launcher[studio]'``.
"""
