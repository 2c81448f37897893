"""store: SQLAlchemy models and queries; SQLite by default, PostgreSQL by URL."""
