// Package filter parses and evaluates the OData v3 $filter expressions of
// Azure Table queries. It is shared by the front-end, which rejects a bad
// filter before any work is done and routes a query to the partitions its
// key bounds can touch, and by the partition servers, which evaluate the
// filter next to the data so that whole ranges never cross the network.
//
// # Grammar
//
// Precedence, loosest first: or, and, not, comparison. Parentheses group.
//
//	filter     = [ or ]                      ; empty or blank: no filter (nil *Filter)
//	or         = and *( "or" and )
//	and        = not *( "and" not )
//	not        = "not" not / primary
//	primary    = "(" or ")" / operand [ cmpop operand ] / property / "true" / "false"
//	cmpop      = "eq" / "ne" / "gt" / "ge" / "lt" / "le"
//	operand    = property / literal          ; exactly one side is a property
//
// Because not binds looser than a comparison, "not A eq 1" is not (A eq 1),
// which is what people mean; WCF Data Services would read (not A) eq 1.
//
// Literals and their EDM types:
//
//	'text'                 String; a quote inside is doubled: 'O''Neil'
//	123, -5                Int32; out of Int32 range is an error, as on Azure
//	123L, 123l             Int64
//	1.5, 1e3, -2.5, 3D     Double (a '.', an exponent or a D/d suffix); INF, -INF, NaN
//	true, false            Boolean
//	datetime'…'            DateTime: yyyy-mm-ddThh:mm[:ss[.fffffff]][Z|±hh:mm]
//	guid'…'                Guid, 8-4-4-4-12 hex digits
//	X'…', binary'…'        Binary, an even number of hex digits
//
// Keywords and operators are case-sensitive (lower case only); true/false
// and the literal prefixes datetime, guid, binary and X are not, as in the
// service (eq True, eq FALSE match Booleans). Whitespace
// (any Unicode space) separates tokens and is needed only where two words
// would otherwise run together: "(A eq 1)and(B eq 2)" and "A eq'x'" parse.
//
// # Errors
//
// Every error wraps one sentinel, so the front-end maps it without parsing
// messages: ErrSyntax and ErrTooManyComparisons become 400 InvalidInput,
// ErrUnsupported becomes 501 NotImplemented ("The requested operation is
// not implemented on the specified resource."), the answer CloudStub's
// service-checked parser gives for a property compared with a property and
// for tokens it does not know; functions and arithmetic are assumed to get
// the same answer. ErrSyntax messages give the byte offset of the offending
// token; CloudStub shows the service answering "Syntax error at position N
// in '…'" with InvalidInput.
//
// Rejected with ErrUnsupported: functions (startswith, substringof, …),
// arithmetic (add, sub, mul, div, mod), member access (A/B), comparing two
// properties, comparing two literals, Edm.Decimal (1M) and Edm.Single (1F)
// literals and datetimeoffset/time/duration literals. Rejected with
// ErrSyntax: null (Azure answers InvalidInput, Azurite issue #2471),
// upper- or mixed-case keywords (Azure rejects "Or", Azurite issue #2512;
// the REST reference says "all parts of the filter string are
// case-sensitive"), a non-Boolean literal used as a condition, and nesting
// deeper than MaxDepth. More than MaxComparisons comparisons (Azure's
// documented limit of 15) is ErrTooManyComparisons; a bare Boolean property
// counts as a comparison, the constants true and false do not.
//
// # Evaluation
//
// Evidence, besides the REST reference, comes mainly from the CloudStub
// project (github.com/Andrei15193/CloudStub), whose query tests run against
// a real storage account as well as its stub
// (CloudStub.Azure.Data.Tables.Tests/Data/TableQueryComparisonTestData.cs and
// Table/Sync/TableClientQueryTests.cs), and from Azurite and Storage
// Explorer issues that compare the emulator with the service.
//
// Matching types compare by value: String ordinally, Binary bytewise (a
// prefix sorts first), Boolean with false < true (CloudStub: "true gt
// false" returns the entity), DateTime as instants, Guid by its 16 bytes in
// the order of the canonical text (which equals .NET Guid.CompareTo), Double
// with NaN below every number and equal to itself (.NET CompareTo).
//
// String order here is UTF-8 byte order. Azure compares UTF-16 code units;
// the two differ only between U+E000–U+FFFF and characters above U+FFFF,
// and byte order is what the storage layer sorts keys by, so bounds and
// evaluation agree with the scan order.
//
// Numbers: a literal is widened to the property's type, never narrowed,
// following OData type promotion and the CloudStub results:
//
//	literal \ property   Int32    Int64    Double
//	Int32                value    value    value
//	Int64                mismatch value    value (literal converted to Double)
//	Double               mismatch mismatch value
//
// Any other pair of types is a mismatch, including a String literal against
// a Guid property (Azurite issue #1504: the service needs guid'…'). On a
// mismatch the service, per CloudStub's tests, answers: eq false, ne true,
// lt true, le true, gt false, ge false. That table is copied as is, odd as
// it looks; Azurite issue #2342 independently observed on the service that
// a Double or DateTime value is "taken as less than" the empty string.
//
// A comparison on a property the entity lacks is false, whatever the
// operator: Foo ne the empty string skips entities without Foo (Azurite issue #1929,
// CloudStub Query_WhenUsingFilterOnNonExistentProperty_ReturnsNoEntities).
// not is plain Boolean negation on top of that, so "not (Missing eq 1)" is
// true: the service returns entities lacking the property for a negated
// condition (azure-storage-net issue #696; CloudStub
// Query_WhenUsingInvertedOrFilter_ReturnsMatchingEntitiesAndTheOnesWithoutDefinedRelatedProperties).
//
// A bare property used as a condition ($filter=IsActive, not IsActive)
// holds when the property exists, is Boolean and is true; on any other type
// it is false rather than an error (CloudStub
// Query_WhenUsingPropertyNameFilterOnExistentProperty_ReturnsNotEntities).
// The constants true and false are accepted as conditions because the .NET
// SDK emits them for predicate-builder queries such as
// "(true and RowKey eq 'x') and (false or PartitionKey eq 'y')"
// (Azurite issue #1787).
//
// Choices without direct evidence: a DateTime literal without a zone is
// UTC; fraction digits beyond the seventh (100 ns, Azure's precision) are
// dropped; Guid literals are read as entity Guids are (edm.GuidBytes); INF, -INF and NaN are
// read as Double literals as in OData v3.
//
// # Bounds
//
// Bounds derives, from the filter alone, an interval of PartitionKey and one
// of RowKey outside which no entity can match. It assumes an entity, whose
// PartitionKey and RowKey always exist as Strings, so a key compared with a
// non-String literal folds to the mismatch constant and a negated key
// comparison is exact ("not (PartitionKey lt 'a')" is PartitionKey ge 'a').
// and intersects, or takes the hull, and comparisons on other properties
// leave both keys unbounded. Both intervals hold for every match, so the
// RowKey interval may be used inside every partition of the PartitionKey
// interval.
package filter
