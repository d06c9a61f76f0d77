package mgr_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// BenchmarkPagesWith10kJobs measures the console's page loads (the data a
// page fetches) with 10,000 jobs in the store; it reports the time per
// page, never asserts one. go test ./internal/mgr -run '^$' -bench Pages -benchtime 20x
func BenchmarkPagesWith10kJobs(b *testing.B) {
	c := testcluster.New(b, testcluster.Options{Workers: 1})
	s := start(b, c, c.Members[0], nil, time.Second)
	x := testcluster.Context(b)
	cl := c.Client()
	const n = 10000
	var wg sync.WaitGroup
	ch := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if _, err := cl.CreateJob(x, &norsk.Job{JobId: fmt.Sprintf("job-%05d", i), Tags: map[string]string{"channel": fmt.Sprint(i % 100)},
					Services: []*norsk.Service{{Name: "main", Command: []string{"/bin/true"}}}}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range n {
		ch <- i
	}
	close(ch)
	wg.Wait()
	br := newBrowser(b, s.URL())
	if br.login("admin", adminPassword) != 200 {
		b.Fatal("sign in")
	}
	eventually(b, "the view holds every job", func() bool {
		_, out, _ := br.do("GET", "/api/overview", nil, nil)
		j, _ := out["jobs"].(map[string]any)
		return j != nil && j["jobs"] == float64(n)
	})
	// In a browser: a full load of the page (the application, the session,
	// the page's data, drawn), when Chromium is here.
	if findChromium() != "" {
		ctx := newBrowserTab(b)
		signIn(b, ctx, s.URL(), "admin", adminPassword)
		for _, p := range []struct{ route, sel string }{
			{"", `main[data-page="overview"] #job-count`}, {"jobs", `main[data-page="jobs"] #jobs-table`},
			{"nodes", `main[data-page="nodes"] #nodes-table`}, {"job/job-05000", `main[data-page="job"] #instances`},
		} {
			b.Run("browser/#/"+p.route, func(b *testing.B) {
				i := 0
				var shown float64
				for b.Loop() {
					i++
					run(b, ctx, "load #/"+p.route, chromedp.Navigate(fmt.Sprintf("%s/?load=%d#/%s", s.URL(), i, p.route)), chromedp.WaitVisible(chromedp.CSS(p.sel)))
					// From the navigation's start to the page drawn with its data.
					ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.getEntriesByName("norsk-page-shown")[0].startTime`))
					if err != nil {
						b.Fatal(err)
					}
					shown += ms
				}
				b.ReportMetric(shown/float64(i), "ms-to-shown/op")
			})
		}
	}
	for _, page := range []string{"/", "/api/overview", "/api/jobs", "/api/jobs?tag=channel=7", "/api/nodes", "/api/migrations", "/api/jobs/job-05000"} {
		b.Run(page, func(b *testing.B) {
			for b.Loop() {
				if code, _, _ := br.do("GET", page, nil, nil); code != http.StatusOK {
					b.Fatalf("%s: %d", page, code)
				}
			}
		})
	}
}
