"""The project menu: pages grouped by what people do (label, review, graders, data, settings),
each page shown only to the roles whose permission its view asks for, and the section and
page of the current request marked. Pages reached from a menu page (a search from Search, a
grader's drift from Graders) belong to that page's entry."""

from dataclasses import dataclass, field

from labeling.access import Perm, ProjectAccess


@dataclass(frozen=True)
class Entry:
    url_name: str
    label: str
    perm: Perm | None  # None: staff only, a site page rather than the project's
    # Other pages (URL names) that count as this entry's for marking the current one.
    owns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Section:
    label: str
    entries: tuple[Entry, ...]


SECTIONS = (
    Section("Label", (
        Entry("label", "Label pairs", Perm.LABEL, ("label-revise",)),
        Entry("grade", "Grade criteria", Perm.LABEL),
        Entry("my-labels", "My labels", Perm.LABEL),
        Entry("queue", "Queue", Perm.VIEW),
        Entry("flags", "Flagged pairs", Perm.MANAGE),
    )),
    Section("Review", (
        Entry("rubric-list", "Rubrics", Perm.REVIEW, ("rubric-review",)),
        Entry("audits", "Audits", Perm.REVIEW, ("audit", "audit-verdict")),
        Entry("agreement", "Agreement", Perm.VIEW),
    )),
    Section("Graders", (
        Entry("graders", "Graders", Perm.SEE_SOURCES,
              ("program", "drift", "grading-run", "grade-trace", "grader-research")),
        Entry("searches", "Search", Perm.SEE_SOURCES, ("search", "search-candidate")),
        Entry("synthesis-runs", "Synthesis", Perm.SEE_SOURCES,
              ("synthesis-run", "synthesis-validation", "synthesis-sweeps", "synthesis-sweep",
               "synthesis-funnel")),
        Entry("judges", "Judges", Perm.SEE_SOURCES, ("judge-edit",)),
        Entry("meta-eval", "Judge accuracy", Perm.SEE_SOURCES),
    )),
    Section("Data", (
        Entry("task-list", "Tasks", Perm.VIEW, ("task-detail",)),
        Entry("import", "Import", Perm.IMPORT),
        Entry("splits", "Splits", Perm.VIEW),
        Entry("export", "Export (JSONL)", Perm.EXPORT),
        Entry("lineage", "Lineage", Perm.SEE_SOURCES),
        Entry("jobs", "Jobs", Perm.VIEW, ("job-detail",)),
    )),
    Section("Settings", (
        Entry("project-settings", "Project settings", Perm.MANAGE,
              ("project-dimension-add", "project-dimension-update", "project-member-add",
               "project-member-update")),
        Entry("api-tokens", "API tokens", Perm.MANAGE, ("api-docs",)),
        Entry("annotators", "Annotators", Perm.MANAGE),
        Entry("admin:index", "Django admin", None),
    )),
)  # fmt: skip


@dataclass
class MenuEntry:
    url_name: str
    label: str
    in_project: bool  # reversed with the project's slug
    # "page" on the page itself, "true" on the entry a page is reached from, "" otherwise.
    current: str


@dataclass
class MenuSection:
    label: str
    current: bool
    entries: list[MenuEntry] = field(default_factory=list)


def project_menu(
    access: ProjectAccess, url_name: str | None, *, is_staff: bool
) -> list[MenuSection]:
    """The sections `access` may use, each with its permitted entries, the current one marked."""
    menu = []
    for section in SECTIONS:
        shown = MenuSection(section.label, current=False)
        for entry in section.entries:
            if not (is_staff if entry.perm is None else access.can(entry.perm)):
                continue
            current = "page" if url_name == entry.url_name else ""
            if url_name in entry.owns:
                current = "true"
            shown.current = shown.current or bool(current)
            in_project = entry.perm is not None
            shown.entries.append(MenuEntry(entry.url_name, entry.label, in_project, current))
        if shown.entries:
            menu.append(shown)
    return menu
