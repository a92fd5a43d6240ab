"""The local dataset page: ``vcollect view`` serves (or writes as static files) a listing of the datasets
under a root and one card per dataset, with its episodes' videos rendered on demand.

Modules by job: summaries (what a page shows, read through the dataset API with bounded memory), charts
(server-side SVG), pages (the HTML, its CSS and script inline), paths (a request's dataset id to its folder,
never outside the root), routes (a request's path to a response; an episode's video is
``Dataset.render_episode``'s frames encoded by ``vcollect.render``'s writer), server (the read-only HTTP server)
and static_site (the same pages written as files).
"""
