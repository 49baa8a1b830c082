package batch

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse parses a change set of 100 inserts laid out as the Go SDK
// writes them (the bench's batch scenario).
func BenchmarkParse(b *testing.B) {
	cs := "--" + testChangeset
	var sb strings.Builder
	sb.WriteString("--" + testBoundary + "\r\nContent-Type: multipart/mixed; boundary=" + testChangeset + "\r\n\r\n")
	for i := range 100 {
		body := fmt.Sprintf(`{"PartitionKey":"b0001","RowKey":"w01-000000001-%03d","Pad":"%s"}`, i, strings.Repeat("x", 900))
		sb.WriteString(cs + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\n" +
			"POST http://127.0.0.1:10002/devstoreaccount1/tbl?%24format=application%2Fjson%3Bodata%3Dminimalmetadata HTTP/1.1\r\n" +
			"Accept: application/json;odata=minimalmetadata\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\nContent-Type: application/json\r\n" +
			"Dataserviceversion: \r\nPrefer: return-no-content\r\nX-Ms-Version: \r\n\r\n" + body + "\r\n")
	}
	sb.WriteString(cs + "--\r\n\r\n--" + testBoundary + "--\r\n")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		bt, err := Parse(testContentTyp, body)
		if err != nil || len(bt.Requests) != 100 {
			b.Fatal(err)
		}
	}
}
