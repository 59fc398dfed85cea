package names

const (
	// AnnotationIdentity names the leader.
	AnnotationIdentity = "fastover.io/leader-identity"
	// AnnotationTerm is the leader's term, in decimal.
	AnnotationTerm = "leader.fastover.io/term"
	// AnnotationHandOver says how the leader's term began.
	AnnotationHandOver = "leader.fastover.io/hand-over"
	// HandOverPlanned is the value for a term begun on a Lease its
	// previous holder released (a planned stop).
	HandOverPlanned = "planned"
	// HandOverUnplanned is the value for a term begun on an expired or a
	// new Lease.
	HandOverUnplanned = "unplanned"
)
